"""tripath/fidelity/seqpar_serving.py end to end: two gloo ranks serve three short requests FCFS, batch 1, on both
replay clock; records are complete and ordered, and each rank's time splits into collectives and the rest."""

from __future__ import annotations

import pytest

from tests.timing import slack
from tripath.core.data_dirs import MODELS_DIR
from tripath.core.request import RequestSpec
from tripath.fidelity.seqpar_serving import serve_seqpar

REQUESTS = [RequestSpec(0, 0.0, 40, 3, "code"), RequestSpec(1, 0.05, 24, 4, "code"), RequestSpec(2, 0.3, 33, 2, "code")]
PROMPTS = [[(7 * i + j) % 200 + 3 for j in range(r.prompt_tokens)] for i, r in enumerate(REQUESTS)]


@pytest.mark.slow  # 32 s on a loaded 2-core machine
def test_serves_every_request_in_order_and_splits_rank_time() -> None:
    # the replay clock (thread CPU + waits in collectives + idle gaps); the wall clock differs only in the clock
    served = serve_seqpar(str(MODELS_DIR / "tiny-target"), 2, REQUESTS, PROMPTS, "cpu", deadline_s=slack(40))
    assert [r.request_id for r in served.records] == [0, 1, 2]
    previous_finish = 0.0
    for record in served.records:  # FCFS, batch 1: admitted after its arrival and after the previous finish
        assert record.status == "completed"
        assert record.admitted_s >= max(record.arrival_s, previous_finish) - 1e-9
        assert record.admitted_s < record.first_token_s < record.finish_s
        previous_finish = record.finish_s
    assert len(served.ranks) == 2
    for use in served.ranks:
        assert 0 < use.comm_cpu_s <= use.comm_s < use.wall_s  # the collectives: inside the steps, CPU <= wall
        assert use.cpu_s > use.comm_cpu_s
    assert served.merge_s > 0 and served.comm_wait_s >= 0
    assert served.core_share is not None and 0 < served.core_share <= 1.05  # thread CPU cannot exceed wall
    # the serving window: every rank's process used CPU in it, and the machine's busy time saw that work. The
    # kernel's /proc/stat counts 0.01 s ticks by sampling which task runs at each tick, so over a window of a few
    # tenths of a second it may read a few ticks under the processes' exact CPU: the bound allows for that
    assert all(0 < use.process_cpu_s and 0 < use.window_s for use in served.ranks)
    busy = served.ranks[0].machine_busy_s
    assert busy is not None and busy >= 0.5 * sum(use.process_cpu_s for use in served.ranks)
    assert served.machine_share is not None and 0 <= served.machine_share <= 1
