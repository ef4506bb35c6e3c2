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
