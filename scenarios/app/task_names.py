"""Names the server and the ClientApp share: client-task names and DP-SGD metric keys.

Light on purpose (no client code): the feature declarations import these names, and the
feature list must import without the ``simulation`` extra (``fedpriv epsilon`` in the base
install); the task implementations are in :mod:`fedpriv.scenarios.app.client_tasks`.
"""

from fedpriv.privacy.modes import client_budgets, distributed_dp, dp_sgd, ifca, zonal

DPSGD_TASK = dp_sgd.MODE.client_task
DPSGD_STATE_KEY = "dp-sgd-ledger"  # the client's own participation count (context.state)
EPSILON_KEY = "dp-sgd-epsilon"
OWN_MECHANISM_KEYS = dp_sgd.OWN_MECHANISM_METRICS  # z, C, δ of the node's own node config
ZONAL_TASK = zonal.MODE.client_task
ZONE_NODE_TASK = "zone-node"  # a zone SuperNode (zonal-runtime = zone-nodes)
IFCA_TASK = ifca.MODE.client_task
CLIENT_BUDGETS_TASK = client_budgets.MODE.client_task
DISTRIBUTED_DP_TASK = distributed_dp.MODE.client_task

# one message per round for train + evaluate (:mod:`fedpriv.scenarios.app.fused`): the train
# message's config flag "evaluate the received model first", and the reply's record holding
# that evaluation (filtered as an evaluate reply's metrics, :mod:`fedpriv.privacy.disclosure`)
EVALUATE_RECEIVED_KEY = "evaluate-received"
EVALUATION_RECORD = "evaluation"
