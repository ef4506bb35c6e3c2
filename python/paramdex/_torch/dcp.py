"""``paramdex.torch.dcp``: the ``torch.distributed.checkpoint`` storage of paramdex (implemented
in ``paramdex/torch_dcp.py``; this file makes ``import paramdex.torch.dcp`` work, ``paramdex.torch``
being a module that lists this directory as its ``__path__``)."""

from paramdex.torch_dcp import *  # noqa: F401,F403
from paramdex.torch_dcp import (  # noqa: F401
    METADATA_KEY,
    PREFIX_NAME,
    StorageReader,
    StorageWriter,
    __all__,
    dcp_to_torch_save,
    torch_save_to_dcp,
    __doc__,
)
