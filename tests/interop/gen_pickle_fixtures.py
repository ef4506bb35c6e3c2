"""Writes tests/data/pickle/*.pkl: pickles shaped as torch.save's data.pkl, written by CPython's
own pickler (fake `torch` / `torch._utils` modules stand in for torch, so no torch is needed), and
the seeds of the `pickle` fuzz target (fuzz/examples/gen_seeds.rs copies the .pkl files).

    python3 tests/interop/gen_pickle_fixtures.py OUT_DIR
"""
import os
import pickle, sys, types, collections
# Fake modules so CPython's pickler writes the globals torch and numpy pickles name.
def mod(name, **attrs):
    m = types.ModuleType(name); 
    for k, v in attrs.items():
        v.__module__ = name; v.__qualname__ = k; setattr(m, k, v)
    sys.modules[name] = m
    return m
def _rebuild_tensor_v2(*a): pass
def _rebuild_parameter(*a): pass
mod('torch._utils', _rebuild_tensor_v2=_rebuild_tensor_v2, _rebuild_parameter=_rebuild_parameter)
class FloatStorage: pass
class BFloat16Storage: pass
torch = mod('torch', FloatStorage=FloatStorage, BFloat16Storage=BFloat16Storage)
class Storage:
    def __init__(s, t, key, n): s.t, s.key, s.n = t, key, n
class Tensor:
    def __init__(s, st, off, size, stride): s.a = (st, off, size, stride)
    def __reduce__(s):
        st, off, size, stride = s.a
        return (_rebuild_tensor_v2, (st, off, size, stride, False, collections.OrderedDict()))
class Param:
    def __init__(s, t): s.t = t
    def __reduce__(s): return (_rebuild_parameter, (s.t, True, collections.OrderedDict()))
class P(pickle.Pickler):
    def persistent_id(s, o):
        if isinstance(o, Storage): return ('storage', o.t, o.key, 'cpu', o.n)
        return None
def dump(obj, proto=2):
    import io; f = io.BytesIO(); P(f, protocol=proto).dump(obj); return f.getvalue()
s0 = Storage(FloatStorage, '0', 6)
s1 = Storage(BFloat16Storage, '1', 4)
w = Param(Tensor(s0, 0, (2, 3), (3, 1)))
sd = collections.OrderedDict([('embed.weight', w), ('head.weight', w), ('wt', Tensor(s0, 0, (3, 2), (1, 3))), ('b', Tensor(s0, 4, (2,), (1,))), ('h', Tensor(s1, 0, (4,), (1,)))])
sd._metadata = collections.OrderedDict([('', {'version': 1})])
out = {'torch_state_dict': dump(sd), 'torch_nested': dump({'model': sd, 'epoch': 3, 'opt': {'state': {0: {'step': Tensor(s1, 0, (), ())}}, 'param_groups': [{'lr': 0.1, 'params': [0]}]}})}
out['od_p2'] = pickle.dumps(collections.OrderedDict([('a', 1), ('b', (2.5, 'x', b'yz', None, True, -3, 2**70)), ('c', [300, 70000])]), protocol=2)
out['od_p4'] = pickle.dumps(collections.OrderedDict([('a', 1), ('b', (2.5, 'x', b'yz', None, True, -3, 2**70)), ('c', [300, 70000])]), protocol=4)
out['posix_system'] = b"\x80\x02cposix\nsystem\nq\x00X\x07\x00\x00\x00touch x\x85q\x01Rq\x02."
out['memo_loop'] = b"\x80\x02]q\x00h\x00a."
dst = sys.argv[1]
for k in ('torch_state_dict', 'torch_nested'):
    open(os.path.join(dst, k + '.pkl'), 'wb').write(out[k])

# Paddle dygraph pickles (paddle.save): dicts of NumPy arrays, pickled as NumPy pickles them,
# with fake `numpy` modules standing in for NumPy.
def _reconstruct(*a): pass
class ndarray: pass
class dtype_:
    def __init__(s, code, order): s.code, s.order = code, order
    def __reduce__(s): return (dtype, (s.code, False, True), (3, s.order, None, None, None, -1, -1, 0))
class dtype: pass
mod('numpy.core.multiarray', _reconstruct=_reconstruct)
mod('numpy', ndarray=ndarray, dtype=dtype)
class Arr:
    def __init__(s, code, shape, raw, order='<', fortran=False):
        s.code, s.shape, s.raw, s.order, s.fortran = code, shape, raw, order, fortran
    def __reduce__(s):
        return (_reconstruct, (ndarray, (0,), b'b'), (1, s.shape, dtype_(s.code, s.order), s.fortran, s.raw))
import struct
w = Arr('f4', (2, 3), struct.pack('<6f', 0, 1, 2, 3, 4, 5))
b = Arr('f4', (3,), struct.pack('<3f', -1, 0.5, 2))
ids = Arr('i8', (2,), struct.pack('<2q', 7, -8))
bf = Arr('u2', (2,), struct.pack('<2H', 0x3f80, 0x4000))
flag = Arr('b1', (), b'\x01', '|')
sd = {'linear.weight': w, 'linear.bias': b, 'emb.ids': ids, 'bf16': bf, 'flag': flag,
      'StructuredToParameterName@@': {'linear.weight': 'linear_0.w_0', 'linear.bias': 'linear_0.b_0'}}
for proto in (2, 4):
    open(os.path.join(dst, 'paddle_p%d.pdparams' % proto), 'wb').write(pickle.dumps(sd, protocol=proto))
# paddle.save of a non-state-dict object: tensors as tuple((name, ndarray)), nested.
class T:
    def __init__(s, name, arr): s.name, s.arr = name, arr
    def __reduce__(s): return (tuple, ((s.name, s.arr),))
obj = {'model': {'w': T('linear_0.w_0', w)}, 'opt': {'moment1': T('linear_0.w_0_moment1_0', b),
       'LR_Scheduler': {'last_epoch': 3, 'last_lr': 0.25}}, 'epoch': 100}
open(os.path.join(dst, 'paddle_nested.pdopt'), 'wb').write(pickle.dumps(obj, protocol=2))
# Refused for that tensor only: big-endian, an object array (data a list), a Fortran array.
odd = {'ok': w, 'big': Arr('f4', (3,), struct.pack('>3f', 1, 2, 3), '>'),
       'fortran': Arr('f4', (2, 3), struct.pack('<6f', 0, 3, 1, 4, 2, 5), '<', True)}
open(os.path.join(dst, 'paddle_odd.pdparams'), 'wb').write(pickle.dumps(odd, protocol=4))

# A whole torch.save-shaped zip (stored entries, as torch writes them) around the state dict
# above: storage 0 holds six float32 (0..5), storage 1 four bfloat16 (1, 2, -1, 0.5).
import zipfile
with zipfile.ZipFile(os.path.join(dst, 'torch_state_dict.pt'), 'w', zipfile.ZIP_STORED) as z:
    def put(name, data):
        info = zipfile.ZipInfo('archive/' + name, date_time=(1980, 1, 1, 0, 0, 0))
        z.writestr(info, data)
    put('data.pkl', out['torch_state_dict'])
    put('byteorder', b'little')
    put('data/0', struct.pack('<6f', 0, 1, 2, 3, 4, 5))
    put('data/1', struct.pack('<4H', 0x3f80, 0x4000, 0xbf80, 0x3f00))
    put('version', b'3\n')
