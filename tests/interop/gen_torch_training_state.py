"""Writes tests/data/pickle/torch_training_state.pt with the real torch (2.15 made the checked-in
file): a full training state as `torch.save` writes it, which `torch.load(weights_only=True)`
loads (checked here) and paramdex must read (tests/torch_training_state.rs):

- `model`: a Linear(2, 2) state dict, weight [[1, 2], [3, 4]] and bias [0.5, -0.5] (float32);
- `optim`: an SGD (momentum 0.9) state dict after one step with all-ones gradients
  (`state.0.momentum_buffer` = ones(2, 2), `state.1.momentum_buffer` = ones(2));
- `rng`: `torch.get_rng_state()` after `torch.manual_seed(0)` (a uint8 tensor of 5056 bytes);
- `py_rng`: `random.getstate()` after `random.seed(0)` (a tuple: 3, 625 ints, None);
- `blob`: `b"\\x00\\xffparamdex"` (pickled as `_codecs.encode`), `buf`: `bytearray(b"ab")`
  (`builtins.bytearray` of `_codecs.encode`), `step`: 7.

    python3 tests/interop/gen_torch_training_state.py OUT.pt
"""
import random
import sys

import torch


def main(out):
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        model.bias.copy_(torch.tensor([0.5, -0.5]))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    # The weights the step moved are not what is checked: save the ones set above.
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        model.bias.copy_(torch.tensor([0.5, -0.5]))
    torch.manual_seed(0)
    random.seed(0)
    state = {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "rng": torch.get_rng_state(),
        "py_rng": random.getstate(),
        "blob": b"\x00\xffparamdex",
        "buf": bytearray(b"ab"),
        "step": 7,
    }
    torch.save(state, out)
    back = torch.load(out, weights_only=True)
    assert back["blob"] == state["blob"] and back["buf"] == state["buf"]
    assert torch.equal(back["rng"], state["rng"])


if __name__ == "__main__":
    main(sys.argv[1])
