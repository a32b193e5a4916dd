"""The driver's supervisor thread never re-creates a helper after its owner stopped it."""

import threading
import time

from lineage_data._ray.actors import Supervisor


class _Helper:
    name, namespace, _handle = "lineage-test-holder", None, None


def test_a_stopped_supervisor_recreates_no_helper_and_stop_waits_for_one_under_way():
    supervisor, created = Supervisor(), []
    supervisor._recreate(_Helper(), lambda: created.append("first"))
    assert created == ["first"] and supervisor.recreated == 1

    started, release = threading.Event(), threading.Event()

    def slow_create():
        started.set()
        release.wait(10)
        created.append("under way")

    recreating = threading.Thread(target=supervisor._recreate, args=(_Helper(), slow_create))
    recreating.start()
    assert started.wait(10)
    stopping = threading.Thread(target=supervisor.stop)
    stopping.start()
    time.sleep(0.2)
    # stop() has not returned: the owner's kill must come after the helper being re-created exists
    assert stopping.is_alive()
    release.set()
    stopping.join(10)
    recreating.join(10)
    assert created == ["first", "under way"]
    supervisor._recreate(_Helper(), lambda: created.append("after stop"))
    assert created == ["first", "under way"] and supervisor.recreated == 2
