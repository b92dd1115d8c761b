"""The PPO roles' protocol (jobs/rlhf/remote.py): a RoleServer on a free port answered by a RoleClient, errors carried
back with the role's name, /shutdown ending serve(), several ranks fed the same requests, and address resolution."""

import queue
import threading
import time

import pytest

from nemo_launcher.jobs.rlhf.remote import RequestError, RoleClient, RoleError, RoleServer, role_address

from ..server_ports import server_ports


def _handlers(calls: list):
    def double(payload):
        calls.append(payload)
        return {"doubled": [2 * x for x in payload["numbers"]]}

    def refuse(payload):
        raise RequestError("numbers must not be empty")

    def crash(payload):
        raise ZeroDivisionError("division by zero in the handler")

    def slow(payload):
        time.sleep(payload["seconds"])
        return {"slept": payload["seconds"]}

    return {"double": double, "refuse": refuse, "crash": crash, "slow": slow}


@pytest.fixture
def served():
    """A single-process role serving _handlers on a free port, on a thread; yields (client, calls, shutdown log)."""
    calls, shutdowns = [], []
    server = RoleServer("critic", 0, _handlers(calls), bind_host="127.0.0.1")
    thread = threading.Thread(target=server.serve, kwargs={"on_shutdown": lambda: shutdowns.append(1) or {"n": 7}})
    thread.start()
    client = RoleClient("critic", "127.0.0.1", server.port, timeout_s=20)
    yield client, calls, shutdowns, thread
    if thread.is_alive():
        client.call("shutdown", {})
        thread.join(10)


def test_a_request_round_trips_as_json(served):
    client, calls, _, _ = served
    assert client.wait_ready(deadline_s=10) == {"ready": True, "role": "critic", "pid": client.wait_ready(1)["pid"]}
    assert client.call("double", {"numbers": [1, 2.5]}) == {"doubled": [2, 5.0]}
    assert calls == [{"numbers": [1, 2.5]}]


def test_handler_errors_reach_the_client_with_the_role_name(served):
    client, _, _, _ = served
    with pytest.raises(RoleError, match=r"critic role at 127\.0\.0\.1:\d+ refused /refuse \(HTTP 400\): numbers must"):
        client.call("refuse", {})
    with pytest.raises(RoleError, match=r"/crash \(HTTP 500\): ZeroDivisionError: division by zero in the handler"):
        client.call("crash", {})
    with pytest.raises(RoleError, match=r"has no /rewards \(it serves /crash, /double, /refuse, /slow, /shutdown\)"):
        client.call("rewards", {"tokens": [[1]]})
    # The role keeps serving after its handler failed.
    assert client.call("double", {"numbers": [3]}) == {"doubled": [6]}


def test_health_answers_while_a_request_is_being_handled(served):
    client, _, _, _ = served
    slow = threading.Thread(target=client.call, args=("slow", {"seconds": 1.5}))
    slow.start()
    time.sleep(0.3)
    started = time.monotonic()
    assert client.wait_ready(deadline_s=5)["ready"] is True
    assert time.monotonic() - started < 1.0
    slow.join()


def test_shutdown_runs_the_final_work_answers_then_ends_serve(served):
    client, _, shutdowns, thread = served
    assert client.call("shutdown", {}) == {"ok": True, "n": 7}
    thread.join(10)
    assert not thread.is_alive() and shutdowns == [1]
    with pytest.raises(RoleError, match=r"critic role at 127\.0\.0\.1:\d+ failed on /double: ConnectionRefused"):
        client.call("double", {"numbers": [1]})


def test_a_request_timeout_names_the_role_and_the_limit(served):
    client, _, _, _ = served
    impatient = RoleClient("critic", client.host, client.port, timeout_s=0.3)
    with pytest.raises(RoleError, match=r"did not answer /slow within 0\.3 s"):
        impatient.call("slow", {"seconds": 1.0})


def test_wait_ready_gives_up_at_its_deadline():
    (port,) = server_ports(1)
    client = RoleClient("reward_model", "127.0.0.1", port, timeout_s=1)
    started = time.monotonic()
    with pytest.raises(RoleError, match=rf"reward_model role at 127\.0\.0\.1:{port} was not ready within 1 s"):
        client.wait_ready(deadline_s=1, poll_s=0.1)
    assert time.monotonic() - started < 5


def test_health_says_not_ready_until_serve_runs():
    server = RoleServer("initial_policy", 0, {}, bind_host="127.0.0.1")
    client = RoleClient("initial_policy", "127.0.0.1", server.port, timeout_s=5)
    with pytest.raises(RoleError, match=r"not ready within 0\.5 s \(answered \{'ready': False"):
        client.wait_ready(deadline_s=0.5, poll_s=0.1)
    thread = threading.Thread(target=server.serve)
    thread.start()
    assert client.wait_ready(deadline_s=5)["role"] == "initial_policy"
    client.call("shutdown", {})
    thread.join(10)


def test_a_port_in_use_is_refused_with_its_key():
    first = RoleServer("critic", 0, {}, bind_host="127.0.0.1")
    with pytest.raises(RoleError, match=rf"critic.trainer.ppo.port={first.port}: the critic role cannot listen there"):
        RoleServer("critic", first.port, {}, port_key="critic.trainer.ppo.port", bind_host="127.0.0.1")
    threading.Thread(target=first.serve, daemon=True).start()
    RoleClient("critic", "127.0.0.1", first.port, 5).call("shutdown", {})


def test_every_rank_handles_each_request_in_the_same_order():
    """Rank 0 hands each request to rank 1 through `share` (a broadcast in the programs; queues here), so both run
    the same handler on the same payload, /shutdown included."""
    to_follower: queue.Queue = queue.Queue()
    seen = {0: [], 1: []}

    def leader_share(message):
        to_follower.put(message)
        return message

    def handlers(rank):
        return {"add": lambda payload: seen[rank].append(payload["x"]) or {"rank": rank, "x": payload["x"]}}

    leader = RoleServer("critic", 0, handlers(0), share=leader_share, rank=0, bind_host="127.0.0.1")
    follower = RoleServer("critic", 0, handlers(1), share=lambda _: to_follower.get(timeout=20), rank=1)
    finals = []
    threads = [
        threading.Thread(target=leader.serve, kwargs={"on_shutdown": lambda: finals.append(0) or {}}),
        threading.Thread(target=follower.serve, kwargs={"on_shutdown": lambda: finals.append(1) or {}}),
    ]
    for thread in threads:
        thread.start()
    client = RoleClient("critic", "127.0.0.1", leader.port, timeout_s=20)
    answers = [client.call("add", {"x": x}) for x in (3, 1, 2)]
    client.call("shutdown", {})
    for thread in threads:
        thread.join(10)
    assert answers == [{"rank": 0, "x": 3}, {"rank": 0, "x": 1}, {"rank": 0, "x": 2}]
    assert seen == {0: [3, 1, 2], 1: [3, 1, 2]} and sorted(finals) == [0, 1]


def test_a_rank_other_than_0_needs_a_share():
    with pytest.raises(ValueError, match="broadcast_share"):
        RoleServer("critic", 0, {}, rank=1)


@pytest.mark.parametrize(
    ("role", "ip", "env", "expected"),
    [
        ("critic", "10.0.0.7", {"NEMO_RLHF_CRITIC_HOST": "node3"}, ("10.0.0.7", 5557)),
        ("critic", None, {"NEMO_RLHF_CRITIC_HOST": "node3"}, ("node3", 5557)),
        ("critic", "", {"NEMO_RLHF_REWARD_MODEL_HOST": "node1"}, ("localhost", 5557)),
        ("reward_model", None, {"NEMO_RLHF_REWARD_MODEL_HOST": "node1"}, ("node1", 5557)),
        ("initial_policy", None, {"NEMO_RLHF_INITIAL_POLICY_HOST": "node2"}, ("node2", 5557)),
        ("initial_policy", None, {"NEMO_RLHF_INITIAL_POLICY_HOST": ""}, ("localhost", 5557)),
    ],
)
def test_role_address_prefers_the_config_then_the_launchers_variable(role, ip, env, expected):
    assert role_address(role, ip, 5557, env) == expected


def test_an_idle_leader_sends_heartbeats_that_the_other_ranks_skip():
    """With no request, rank 0 ends the other ranks' wait every heartbeat_s (their broadcast would time out after
    the process group's timeout otherwise); they handle nothing for it."""
    to_follower: queue.Queue = queue.Queue()
    sent, seen = [], []

    def leader_share(message):
        sent.append(message)
        to_follower.put(message)
        return message

    leader = RoleServer("critic", 0, {"add": lambda p: {}}, share=leader_share, bind_host="127.0.0.1", heartbeat_s=0.1)
    follower = RoleServer(
        "critic", 0, {"add": lambda p: seen.append(p) or {}}, share=lambda _: to_follower.get(timeout=20), rank=1
    )
    threads = [threading.Thread(target=leader.serve), threading.Thread(target=follower.serve)]
    for thread in threads:
        thread.start()
    time.sleep(0.6)
    client = RoleClient("critic", "127.0.0.1", leader.port, timeout_s=20)
    client.call("add", {"x": 1})
    client.call("shutdown", {})
    for thread in threads:
        thread.join(10)
    heartbeats = [m for m in sent if m == ("", None)]
    assert len(heartbeats) >= 3 and sent[-2:] == [("add", {"x": 1}), ("shutdown", {})]
    assert seen == [{"x": 1}]


def test_a_fault_in_a_handler_is_answered_then_stops_the_role_with_it():
    from nemo_launcher.jobs.common.report import JobFault

    class DiskFull(JobFault):
        exit_code = 74

    def save(payload):
        raise DiskFull("/results/critic_states: no space left on device")

    server = RoleServer("critic", 0, {"save": save}, bind_host="127.0.0.1")
    raised = []

    def serve():
        try:
            server.serve()
        except JobFault as error:
            raised.append(error)

    thread = threading.Thread(target=serve)
    thread.start()
    client = RoleClient("critic", "127.0.0.1", server.port, timeout_s=20)
    with pytest.raises(RoleError, match=r"\(HTTP 500\): /results/critic_states: no space left on device \(the critic"):
        client.call("save", {"step": 1})
    thread.join(10)
    assert not thread.is_alive() and [e.exit_code for e in raised] == [74]
