"""The run directory: the bottom layer of the engine.

`RunDir` names every path of a run; the modules here read and write what lives there: result
shards (`shards`), the gateways' paid ledger (`paid`) and answer journal (`journal`), the response
cache beside it (`cache`), ownership (`ownership`) and object storage (`remote`). Nothing here
imports another part of the engine but `types`.
"""

from prefray.engine.rundir.layout import RunDir

__all__ = ["RunDir"]
