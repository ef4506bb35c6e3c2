//! The restricted unpickler on hand-built pickles: valid ones (as CPython's `pickle.dumps`
//! writes them, disassembled in the comments) and every hostile case of issue 30.

use super::unpickler::op;
use super::*;

const ALLOW: &[GlobalName] = &[("collections", "OrderedDict"), ("_codecs", "encode")];

/// `pickle.dumps(OrderedDict([('a', 1), ('b', (2.5, 'x', b'yz', None, True, -3, 2**70)),
/// ('c', [300, 70000])]), protocol=2)`, byte for byte as CPython 3 writes it.
const OD_P2: &[u8] = b"\x80\x02\
ccollections\nOrderedDict\nq\x00)Rq\x01(\
X\x01\x00\x00\x00aq\x02K\x01\
X\x01\x00\x00\x00bq\x03(G@\x04\x00\x00\x00\x00\x00\x00X\x01\x00\x00\x00xq\x04\
c_codecs\nencode\nq\x05X\x02\x00\x00\x00yzq\x06X\x06\x00\x00\x00latin1q\x07\x86q\x08Rq\t\
N\x88J\xfd\xff\xff\xff\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@tq\n\
X\x01\x00\x00\x00cq\x0b]q\x0c(M,\x01Jp\x11\x01\x00eu.";

/// The same object at protocol 4: a FRAME, SHORT_BINUNICODE, STACK_GLOBAL, MEMOIZE and
/// SHORT_BINBYTES (`b'yz'` directly, no `_codecs`).
const OD_P4: &[u8] = b"\x80\x04\x95e\x00\x00\x00\x00\x00\x00\x00\
\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94(\
\x8c\x01a\x94K\x01\
\x8c\x01b\x94(G@\x04\x00\x00\x00\x00\x00\x00\x8c\x01x\x94C\x02yz\x94N\x88J\xfd\xff\xff\xff\
\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@t\x94\
\x8c\x01c\x94]\x94(M,\x01Jp\x11\x01\x00eu.";

fn problem(r: Result<Pickle>) -> (PickleProblem, String) {
    match r {
        Err(e @ Error::Pickle { problem, .. }) => (problem, e.to_string()),
        Err(e) => panic!("not a pickle error: {e:?}"),
        Ok(p) => panic!("parsed: {:?}", p.root()),
    }
}

fn check_od(data: &[u8]) {
    let p = parse(data, "t.pkl", ALLOW).unwrap();
    let Some(Object::Dict { ordered, items, .. }) = p.object(p.root()) else {
        panic!("root is not a dict: {:?}", p.root());
    };
    assert!(ordered);
    assert_eq!(items.len(), 3);
    assert_eq!(items[0], (Value::Str("a".into()), Value::Int(1)));
    let Some(Object::Tuple(t)) = p.object(&items[1].1) else {
        panic!("b is not a tuple");
    };
    assert_eq!(t[0], Value::Float(2.5));
    assert_eq!(t[1], Value::Str("x".into()));
    let Value::Bytes(b) = &t[2] else {
        panic!("not bytes: {:?}", t[2]);
    };
    assert_eq!(p.bytes(b, data), Some(&b"yz"[..]));
    assert_eq!(t[3], Value::None);
    assert_eq!(t[4], Value::Bool(true));
    assert_eq!(t[5], Value::Int(-3));
    // 2**70: nine little-endian bytes.
    assert_eq!(
        t[6],
        Value::BigInt(Arc::from(&[0, 0, 0, 0, 0, 0, 0, 0, 0x40][..]))
    );
    let Some(Object::List(l)) = p.object(&items[2].1) else {
        panic!("c is not a list");
    };
    assert_eq!(l, &[Value::Int(300), Value::Int(70000)]);
    assert_eq!(p.end(), data.len());
    let names: Vec<String> = p
        .named_leaves("t.pkl")
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        ["a", "b.0", "b.1", "b.2", "b.3", "b.4", "b.5", "b.6", "c.0", "c.1"]
    );
}

#[test]
fn reads_what_cpython_writes_at_protocols_2_and_4() {
    check_od(OD_P2);
    check_od(OD_P4);
}

#[test]
fn a_persistent_id_is_surfaced_not_resolved() {
    // PROTO 2; MARK; 'storage'; K 0 ; TUPLE; BINPERSID; STOP
    let data = b"\x80\x02(X\x07\x00\x00\x00storageK\x00tQ.";
    let p = parse(data, "t", &[]).unwrap();
    let Some(Object::PersistentId(pid)) = p.object(p.root()) else {
        panic!("{:?}", p.root());
    };
    let Some(Object::Tuple(t)) = p.object(pid) else {
        panic!("{pid:?}");
    };
    assert_eq!(t, &[Value::Str("storage".into()), Value::Int(0)]);
}

#[test]
fn a_posix_system_reduce_is_refused_naming_the_global() {
    // What `pickle.dumps` writes for an object whose __reduce__ is (os.system, ('touch x',)):
    // PROTO 2; GLOBAL 'posix system'; BINPUT 0; BINUNICODE 'touch x'; TUPLE1; REDUCE; STOP.
    let data = b"\x80\x02cposix\nsystem\nq\x00X\x07\x00\x00\x00touch x\x85q\x01Rq\x02.";
    for allowed in [TORCH_GLOBALS, NUMPY_GLOBALS, ALLOW] {
        let (p, msg) = problem(parse(data, "evil.pkl", allowed));
        assert_eq!(p, PickleProblem::ForbiddenGlobal);
        assert!(msg.contains("posix.system"), "{msg}");
        assert!(msg.contains("evil.pkl"), "{msg}");
        // Refused at the GLOBAL opcode, offset 2.
        assert!(msg.contains("offset 2:"), "{msg}");
    }
}

#[test]
fn other_hostile_globals_are_refused_by_name() {
    // Protocol 4, STACK_GLOBAL 'builtins' 'eval' then REDUCE of ('1',).
    let eval = b"\x80\x04\x8c\x08builtins\x94\x8c\x04eval\x94\x93\x94\x8c\x011\x85R.";
    let (p, msg) = problem(parse(eval, "t", TORCH_GLOBALS));
    assert_eq!(p, PickleProblem::ForbiddenGlobal);
    assert!(msg.contains("builtins.eval"), "{msg}");
    // GLOBAL 'subprocess Popen', 'os system', and globals of the other format's list.
    for (data, name) in [
        (&b"\x80\x02csubprocess\nPopen\n."[..], "subprocess.Popen"),
        (b"\x80\x02cos\nsystem\n.", "os.system"),
        (b"\x80\x02cnumpy\nndarray\n.", "numpy.ndarray"),
        (
            b"\x80\x02ctorch.nn.modules.linear\nLinear\n.",
            "torch.nn.modules.linear.Linear",
        ),
    ] {
        let (p, msg) = problem(parse(data, "t", TORCH_GLOBALS));
        assert_eq!(p, PickleProblem::ForbiddenGlobal, "{name}");
        assert!(msg.contains(name), "{msg}");
    }
    // INST names its class too (protocol 0), refused by name before anything else.
    let (p, msg) = problem(parse(b"(S'ls'\nios\nsystem\n.", "t", TORCH_GLOBALS));
    assert_eq!(p, PickleProblem::UnsupportedOpcode, "{msg}");
    let (p, msg) = problem(parse(b"(ios\nsystem\n.", "t", TORCH_GLOBALS));
    assert_eq!(p, PickleProblem::ForbiddenGlobal);
    assert!(msg.contains("os.system"), "{msg}");
    // The same bytes with the global allowed parse: the refusal is the allow-list's doing.
    assert!(parse(b"\x80\x02cnumpy\nndarray\n.", "t", NUMPY_GLOBALS).is_ok());
    // An allowed global is never called: REDUCE only records the call.
    let data = b"\x80\x02cnumpy\ndtype\nX\x02\x00\x00\x00f4\x85R.";
    let p = parse(data, "t", NUMPY_GLOBALS).unwrap();
    assert!(matches!(
        p.object(p.root()),
        Some(Object::Call { func: ("numpy", "dtype"), args, .. }) if args.len() == 1
    ));
}

#[test]
fn calling_something_that_is_not_a_global_is_refused() {
    // REDUCE with a str as the callable: EMPTY_TUPLE is the args, 'x' the callable.
    let data = b"\x80\x02X\x01\x00\x00\x00x)R.";
    let (p, _) = problem(parse(data, "t", TORCH_GLOBALS));
    assert_eq!(p, PickleProblem::ForbiddenGlobal);
    // _codecs.encode with another encoding.
    let data = b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\x05\x00\x00\x00rot13\x86R.";
    let (p, _) = problem(parse(data, "t", ALLOW));
    assert_eq!(p, PickleProblem::ForbiddenGlobal);
}

#[test]
fn a_memo_loop_parses_and_is_refused_when_walked() {
    // EMPTY_LIST; BINPUT 0; BINGET 0; APPEND; STOP: a list that holds itself.
    let data = b"\x80\x02]q\x00h\x00a.";
    let p = parse(data, "loop.pkl", &[]).unwrap();
    let Some(Object::List(items)) = p.object(p.root()) else {
        panic!();
    };
    assert_eq!(items[0], *p.root());
    let e = p.named_leaves("loop.pkl").unwrap_err();
    assert!(
        matches!(
            e,
            Error::Pickle {
                problem: PickleProblem::Limit,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("holds itself"), "{e}");
    // A dict holding itself under key 'a': EMPTY_DICT; BINPUT 0; 'a'; BINGET 0; SETITEM.
    let data = b"\x80\x02}q\x00X\x01\x00\x00\x00ah\x00s.";
    let p = parse(data, "t", &[]).unwrap();
    assert!(p.named_leaves("t").is_err());
    // A memo index never stored.
    let (pr, _) = problem(parse(b"\x80\x02h\x05.", "t", &[]));
    assert_eq!(pr, PickleProblem::Malformed);
}

#[test]
fn shared_values_are_not_copied() {
    // One list L=[1]; then a list of 200 000 references to it (BINGET 0 each): 200k values
    // referring to one container, not 200k copies.
    let mut data = b"\x80\x02]q\x00K\x01a](".to_vec();
    for _ in 0..200_000 {
        data.extend_from_slice(b"h\x00");
    }
    data.extend_from_slice(b"e.");
    let p = parse(&data, "t", &[]).unwrap();
    // Two containers in the arena.
    assert_eq!(p.objects.len(), 2);
    assert_eq!(p.named_leaves("t").unwrap().len(), 200_000);
}

#[test]
fn a_10_gb_length_is_refused_before_allocation() {
    let ten_gb = 10_000_000_000u64.to_le_bytes();
    for code in [op::BINBYTES8, op::BINUNICODE8, op::BYTEARRAY8, op::FRAME] {
        let mut data = vec![0x80, 4, code];
        data.extend_from_slice(&ten_gb);
        data.extend_from_slice(b"abc.");
        let (p, msg) = problem(parse(&data, "t", &[]));
        assert_eq!(p, PickleProblem::Truncated, "{code:#x}: {msg}");
        assert!(msg.contains("10000000000 bytes"), "{msg}");
    }
    // BINBYTES, BINUNICODE: 4 GB - 1; LONG4: 2 GB - 1.
    for data in [
        &b"\x80\x03B\xff\xff\xff\xffabc."[..],
        b"\x80\x03X\xff\xff\xff\xffabc.",
        b"\x80\x03\x8b\xff\xff\xff\x7fabc.",
    ] {
        let (p, _) = problem(parse(data, "t", &[]));
        assert_eq!(p, PickleProblem::Truncated);
    }
}

#[test]
fn deep_nesting_is_refused() {
    // 10 000 EMPTY_LISTs, then 9 999 APPENDs nesting each into the one below.
    let mut data = b"\x80\x02".to_vec();
    data.extend(std::iter::repeat_n(b']', 10_000));
    data.extend(std::iter::repeat_n(b'a', 9_999));
    data.push(b'.');
    let (p, msg) = problem(parse(&data, "t", &[]));
    assert_eq!(p, PickleProblem::Limit);
    assert!(msg.contains("deeper than 256"), "{msg}");
    // Exactly MAX_DEPTH levels parse.
    let mut ok = b"\x80\x02".to_vec();
    ok.extend(std::iter::repeat_n(b']', MAX_DEPTH));
    ok.extend(std::iter::repeat_n(b'a', MAX_DEPTH - 1));
    ok.push(b'.');
    assert!(parse(&ok, "t", &[]).is_ok());
    // 10 000 open MARKs.
    let mut marks = b"\x80\x02".to_vec();
    marks.extend(std::iter::repeat_n(b'(', 10_000));
    let (p, msg) = problem(parse(&marks, "t", &[]));
    assert_eq!(p, PickleProblem::Limit, "{msg}");
    // 10 000 nested tuples of one: EMPTY_TUPLE then TUPLE1 9 999 times.
    let mut tuples = b"\x80\x02)".to_vec();
    tuples.extend(std::iter::repeat_n(op::TUPLE1, 9_999));
    tuples.push(b'.');
    let (p, _) = problem(parse(&tuples, "t", &[]));
    assert_eq!(p, PickleProblem::Limit);
}

#[test]
fn nesting_built_through_the_memo_is_refused_when_walked() {
    // 300 empty lists, each memoised (LONG_BINPUT i) and popped; then for i in 1..300: GET
    // i-1, GET i, APPEND, POP: list i-1 holds list i, built from the innermost *last*, so each
    // list was shallow when it was put in its parent; the tree is 300 deep. Parsing cannot see
    // it (the depths it tracks were taken before); the walk does.
    let n = 300u32;
    let mut data = b"\x80\x02".to_vec();
    for i in 0..n {
        data.push(b']');
        data.push(op::LONG_BINPUT);
        data.extend_from_slice(&i.to_le_bytes());
        data.push(op::POP);
    }
    for i in 1..n {
        data.push(op::LONG_BINGET);
        data.extend_from_slice(&(i - 1).to_le_bytes());
        data.push(op::LONG_BINGET);
        data.extend_from_slice(&i.to_le_bytes());
        data.push(op::APPEND);
        data.push(op::POP);
    }
    data.push(op::LONG_BINGET);
    data.extend_from_slice(&0u32.to_le_bytes());
    data.push(op::STOP);
    let p = parse(&data, "t", &[]).unwrap();
    let e = p.named_leaves("t").unwrap_err();
    assert!(e.to_string().contains("deeper than 256"), "{e}");
}

#[test]
fn every_truncation_is_an_error() {
    for data in [OD_P2, OD_P4] {
        for cut in 0..data.len() {
            let (p, msg) = problem(parse(&data[..cut], "t", ALLOW));
            assert_eq!(p, PickleProblem::Truncated, "cut at {cut}: {msg}");
        }
    }
}

#[test]
fn malformed_and_unsupported_opcodes() {
    // APPEND on an empty stack.
    assert_eq!(
        problem(parse(b"\x80\x02a.", "t", &[])).0,
        PickleProblem::Malformed
    );
    // APPEND to a dict.
    assert_eq!(
        problem(parse(b"\x80\x02}K\x01a.", "t", &[])).0,
        PickleProblem::Malformed
    );
    // TUPLE without a MARK.
    assert_eq!(
        problem(parse(b"\x80\x02K\x01t.", "t", &[])).0,
        PickleProblem::Malformed
    );
    // STOP on an empty stack.
    assert_eq!(
        problem(parse(b"\x80\x02.", "t", &[])).0,
        PickleProblem::Malformed
    );
    // A str that is not UTF-8.
    assert_eq!(
        problem(parse(b"\x80\x02X\x01\x00\x00\x00\xff.", "t", &[])).0,
        PickleProblem::Malformed
    );
    // Protocol 0 STRING, EXT1, NEXT_BUFFER, protocol 6, a byte that is no opcode.
    for data in [
        &b"S'a'\n."[..],
        b"\x80\x02\x82\x01.",
        b"\x80\x05\x97.",
        b"\x80\x06N.",
        b"\xff",
    ] {
        assert_eq!(
            problem(parse(data, "t", &[])).0,
            PickleProblem::UnsupportedOpcode
        );
    }
    // A GLOBAL line longer than the bound.
    let mut long = b"\x80\x02c".to_vec();
    long.extend(std::iter::repeat_n(b'a', MAX_GLOBAL_LEN + 10));
    long.extend_from_slice(b"\nb\n.");
    assert_eq!(problem(parse(&long, "t", &[])).0, PickleProblem::Limit);
}

#[test]
fn copying_a_large_tuple_over_and_over_is_refused() {
    // A tuple of 50 000 Nones (memo 0), then 10 000 times: GLOBAL builtins.complex (memo 1 after
    // the first), BINGET 0, REDUCE, POP. Each REDUCE records the tuple's items as arguments;
    // unbounded, 10 000 copies of 50 000 items from a stream of 100 KB.
    let mut data = b"\x80\x02(".to_vec();
    data.extend(std::iter::repeat_n(b'N', 50_000));
    data.extend_from_slice(b"tq\x00cbuiltins\ncomplex\nq\x010");
    for _ in 0..10_000 {
        data.extend_from_slice(b"h\x01h\x00R0");
    }
    data.extend_from_slice(b"N.");
    let (p, msg) = problem(parse(&data, "t", TORCH_GLOBALS));
    assert_eq!(p, PickleProblem::Limit, "{msg}");
    assert!(msg.contains("per byte"), "{msg}");
    // A handful of such calls is fine.
    let mut ok = b"\x80\x02(".to_vec();
    ok.extend(std::iter::repeat_n(b'N', 50_000));
    ok.extend_from_slice(b"tq\x00cbuiltins\ncomplex\nq\x010");
    for _ in 0..2 {
        ok.extend_from_slice(b"h\x01h\x00R0");
    }
    ok.extend_from_slice(b"N.");
    assert!(parse(&ok, "t", TORCH_GLOBALS).is_ok());
}

#[test]
fn naming_a_much_shared_list_is_bounded() {
    // L = a list of 5 000 Nones (memo 0); then a list holding L 5 000 times (BINGET 0 each):
    // 25 million names from 20 KB. Parsing is cheap (shared); the walk stops within 8 visits
    // per byte of the stream (MAX_VISITS_PER_BYTE).
    let mut data = b"\x80\x02](".to_vec();
    data.extend(std::iter::repeat_n(b'N', 5_000));
    data.extend_from_slice(b"eq\x00](");
    for _ in 0..5_000 {
        data.extend_from_slice(b"h\x00");
    }
    data.extend_from_slice(b"e.");
    let p = parse(&data, "t", &[]).unwrap();
    let e = p.named_leaves("t").unwrap_err();
    assert!(
        matches!(
            e,
            Error::Pickle {
                problem: PickleProblem::Limit,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn names_are_bounded_in_length() {
    // A 1 000-byte key (memo 0) at each of 100 nested dict levels: a 100 KB name. (After 40 KB
    // of padding, so that the names on the way, 2 MB in all, are within the stream's budget.)
    let mut data = b"\x80\x02X".to_vec();
    data.extend_from_slice(&40_000u32.to_le_bytes());
    data.extend(std::iter::repeat_n(b'p', 40_000));
    data.push(b'0');
    let key = "k".repeat(1000);
    data.push(b'X');
    data.extend_from_slice(&1000u32.to_le_bytes());
    data.extend_from_slice(key.as_bytes());
    data.extend_from_slice(b"q\x000N");
    for _ in 0..100 {
        // {key: value}: EMPTY_DICT, BINGET 0, (the value below), ... built innermost first.
        data.extend_from_slice(b"}h\x00");
    }
    // Innermost value: None; then 100 SETITEMs close the dicts from the inside out.
    data.push(b'N');
    data.extend(std::iter::repeat_n(b's', 100));
    data.push(b'.');
    let p = parse(&data, "t", &[]).unwrap();
    let e = p.named_leaves("t").unwrap_err();
    assert!(e.to_string().contains("longer than 65536 bytes"), "{e}");
}

/// `levels` nested tuples, each of `width` references to the one below (DUP), over `None`:
/// `width^levels` paths to one value from about `levels * width` bytes, as the fuzzer's two
/// slow units of issue 43 have.
fn nested_dups(levels: usize, width: usize) -> Vec<u8> {
    let mut data = b"\x80\x02N".to_vec();
    for _ in 0..levels {
        // MARK below the value: POP it into memo first, then MARK, GET, DUP...
        data.extend_from_slice(b"q\x000(h\x00");
        data.extend(std::iter::repeat_n(b'2', width - 1));
        data.push(b't');
    }
    data.push(b'.');
    data
}

#[test]
fn naming_nested_shared_tuples_is_bounded_by_the_stream() {
    // 100^4 = 100 million names from 420 bytes: refused after at most 8 visits per byte (plus
    // 4096), at the offset of a container being named, not after millions.
    let data = nested_dups(4, 100);
    let p = parse(&data, "t", &[]).unwrap();
    match p.named_leaves("t").unwrap_err() {
        Error::Pickle {
            problem: PickleProblem::Limit,
            offset,
            detail,
            ..
        } => {
            assert!(detail.contains("values to name"), "{detail}");
            assert!(detail.contains("per byte"), "{detail}");
            assert!((offset as usize) < data.len(), "offset {offset}");
        }
        e => panic!("{e:?}"),
    }
    // Fewer paths than the budget: every one named.
    let small = nested_dups(2, 30);
    let p = parse(&small, "t", &[]).unwrap();
    assert_eq!(p.named_leaves("t").unwrap().len(), 900);
}

#[test]
fn a_state_dict_saved_twice_is_named_twice() {
    // {"a": sd, "b": sd}, sd a dict of 2 000 ints: 4 000 names, within the budget.
    let mut data = b"\x80\x02}q\x00(".to_vec();
    for i in 0..2000u32 {
        let k = format!("k{i}");
        data.push(0x8c);
        data.push(k.len() as u8);
        data.extend_from_slice(k.as_bytes());
        data.extend_from_slice(b"K\x01");
    }
    data.extend_from_slice(b"u}q\x01(\x8c\x01ah\x00\x8c\x01bh\x00u.");
    let p = parse(&data, "t", &[]).unwrap();
    let names = p.named_leaves("t").unwrap();
    assert_eq!(names.len(), 4000);
    assert_eq!(names[0].0, "a.k0");
    assert_eq!(names[2000].0, "b.k0");
}

#[test]
fn names_made_of_a_shared_long_key_are_bounded_in_total() {
    // D = {60 000-byte key: None} (memo 0), then a list of D 1 000 times: 60 MB of names from
    // 62 KB, each name under MAX_NAME_LEN, few visits: refused by the name bytes budget.
    let key = "k".repeat(60_000);
    let mut data = b"\x80\x02}q\x00X".to_vec();
    data.extend_from_slice(&60_000u32.to_le_bytes());
    data.extend_from_slice(key.as_bytes());
    data.extend_from_slice(b"Ns](");
    for _ in 0..1000 {
        data.extend_from_slice(b"h\x00");
    }
    data.extend_from_slice(b"e.");
    let p = parse(&data, "t", &[]).unwrap();
    let e = p.named_leaves("t").unwrap_err();
    assert!(e.to_string().contains("come to more than"), "{e}");
    assert!(
        matches!(
            e,
            Error::Pickle {
                problem: PickleProblem::Limit,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_long_name_cut_inside_a_character_is_reported_without_panicking() {
    // A 1 001-byte key, "a" then 500 two-byte characters (byte 200 falls inside one), at 100
    // nested levels: the message shows the name's first 200 bytes or fewer, on a character
    // boundary.
    let key = format!("a{}", "é".repeat(500));
    let mut data = b"\x80\x02X".to_vec();
    data.extend_from_slice(&(key.len() as u32).to_le_bytes());
    data.extend_from_slice(key.as_bytes());
    data.extend_from_slice(b"q\x000N");
    for _ in 0..100 {
        data.extend_from_slice(b"}h\x00");
    }
    data.push(b'N');
    data.extend(std::iter::repeat_n(b's', 100));
    data.push(b'.');
    let p = parse(&data, "t", &[]).unwrap();
    let e = p.named_leaves("t").unwrap_err();
    // The names on the way pass the stream's budget of name bytes first.
    assert!(e.to_string().contains("come to more than"), "{e}");
    assert!(
        e.to_string().contains(&format!("\"a{}\"", "é".repeat(99))),
        "{e}"
    );
}

#[test]
fn bytearray_and_counter_are_read_as_torch_writes_them() {
    // pickle.dumps({'b': bytearray(b'xy'), 'c': collections.Counter(a=2)}, protocol=2)
    let data = b"\x80\x02}q\x00(X\x01\x00\x00\x00bq\x01c__builtin__\nbytearray\nq\x02c_codecs\nencode\nq\x03X\x02\x00\x00\x00xyq\x04X\x06\x00\x00\x00latin1q\x05\x86q\x06Rq\x07\x85q\x08Rq\tX\x01\x00\x00\x00cq\nccollections\nCounter\nq\x0b}q\x0cX\x01\x00\x00\x00aq\rK\x02s\x85q\x0eRq\x0fu.";
    let p = parse(data, "t", TORCH_GLOBALS).unwrap();
    let leaves = p.named_leaves("t").unwrap();
    let Value::Bytes(b) = &leaves[0].1 else {
        panic!("{leaves:?}");
    };
    assert_eq!(leaves[0].0, "b");
    assert_eq!(p.bytes(b, data), Some(&b"xy"[..]));
    // Counter({'a': 2}) is pickled as Counter(dict): a call, not evaluated; a leaf.
    assert_eq!(leaves[1].0, "c");
}

#[test]
fn torch_weights_only_refusals_are_refused() {
    // What torch.load(weights_only=True) refuses by default: bytes() (an empty bytes at
    // protocol 2), frozenset, slice, NumPy arrays.
    for (module, name) in [
        ("__builtin__", "bytes"),
        ("__builtin__", "frozenset"),
        ("__builtin__", "slice"),
        ("numpy", "ndarray"),
        ("numpy.core.multiarray", "_reconstruct"),
    ] {
        let data = format!("\x02c{module}\n{name}\n)R.");
        let mut bytes = b"\x80".to_vec();
        bytes.extend_from_slice(data.as_bytes());
        let (p, msg) = problem(parse(&bytes, "t", TORCH_GLOBALS));
        assert_eq!(p, PickleProblem::ForbiddenGlobal, "{module}.{name}: {msg}");
    }
    for (module, name) in [
        ("_codecs", "encode"),
        ("__builtin__", "bytearray"),
        ("__builtin__", "complex"),
        ("collections", "Counter"),
        ("torch", "device"),
        ("torch._tensor", "_rebuild_from_type_v2"),
        ("torch.storage", "UntypedStorage"),
    ] {
        assert!(
            TORCH_GLOBALS.contains(&(
                if module == "__builtin__" {
                    "builtins"
                } else {
                    module
                },
                name
            )),
            "{module}.{name}"
        );
    }
}
