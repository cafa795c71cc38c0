"""Two Ray nodes on one machine: trials spread over both; losing one loses no trial."""

import threading
import time

import ray
from mlflow.tracking import MlflowClient
from ray.cluster_utils import Cluster

from tests.trials.conftest import D1_D9, write_spec
from tests.trials.test_runner import children
from trials import runner, validate


def test_two_nodes_spread_and_survive_losing_one(tmp_path, corpus_dir):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "nodes", D1_D9, max_failures=2,
                                   base={"target_steps": 10, "draft_steps": 150, "eval_interval": 10,
                                         "eval_batches": 1, "spec_prompts": 2, "spec_new_tokens": 16,
                                         "spec_prompt_len": 16}))
    result = {}

    def go():
        result["out"] = runner.run(spec, tracking_uri=uri, storage=str(tmp_path / "st"),
                                   address=cluster.address, verbose=0)

    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        worker_id = worker.node_id
        th = threading.Thread(target=go)
        th.start()
        deadline = time.time() + 180
        killed = False
        while time.time() < deadline and th.is_alive():
            time.sleep(0.5)
            try:
                _, _, kids = children(uri, "nodes")
            except Exception:
                continue
            on_worker = [k for k in kids if worker_id in k.data.tags.get("ray_nodes", "")
                         and k.info.status == "RUNNING"]
            if on_worker and not killed:
                cluster.remove_node(worker)
                killed = True
                break
        th.join(timeout=600)
        assert killed, "no trial ran on the second node"
        assert result["out"]["finished"] == 4 and result["out"]["failed"] == 0
        _, _, kids = children(uri, "nodes")
        assert len(kids) == 4 and all(k.info.status == "FINISHED" for k in kids)
        nodes = set()
        for k in kids:
            nodes.update(k.data.tags.get("ray_nodes", "").split(","))
        assert worker_id in nodes and len(nodes - {""}) == 2  # trials ran on both nodes
        client = MlflowClient(uri)
        for k in kids:  # the trial restarted on the head logged no step twice
            for key in k.data.metrics:
                steps = [m.step for m in client.get_metric_history(k.info.run_id, key)]
                assert len(steps) == len(set(steps)), (k.info.run_name, key)
    finally:
        ray.shutdown()
        cluster.shutdown()
