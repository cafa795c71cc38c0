"""trials.store.reader: what the reading commands read gives what MLflow's own client gives.
A SQLite (or any SQL) store is read by MLflow's client itself; a tracking server through
MLflow's REST API with `requests`, compared with MLflow's client on the same server in
tests/trials/test_postgres.py. Every failure is one line naming the store."""

import math
from pathlib import Path

import pytest

from trials.store.keys import StoreReadError
from trials.store.keys import SWEEP_PARENT_TAG, TRIAL_KEY_TAG, sweep_parent, sweep_trials
from trials.store.reader import RestReader, parse_filter, reading_client, run_items
from trials.store.runs import log_metrics

ROOT = Path(__file__).resolve().parents[3]


def populate(client) -> None:
    """Two sweeps' experiments written through MLflow: a parent and trials with tags, params,
    metrics logged at several steps (the latest is read) and a NaN; a finished, a failed and
    a running trial; a deleted trial; a run with an empty trial key; a deleted experiment."""
    from mlflow.entities import Metric, Param, RunTag

    for name in ("alpha", "beta"):
        eid = client.create_experiment(name, tags={"mlflow.sharedViewState.dspark": '{"a": 1}', "kind": name})
        parent = client.create_run(eid, run_name=f"{name} sweep", tags={SWEEP_PARENT_TAG: "true", "driver_pid": "1"})
        client.log_param(parent.info.run_id, "factors", '{"D1": ["shifted", "aligned"]}')
        client.set_terminated(parent.info.run_id, "FINISHED")
        for i in range(7):
            run = client.create_run(eid, run_name=f"aligned·{i} r{i % 2}",
                                    tags={TRIAL_KEY_TAG: f"cell{i}", "factor.D1": ["shifted", "aligned"][i % 2],
                                          "mlflow.parentRunId": parent.info.run_id})
            rid = run.info.run_id
            metrics = [Metric("spec/tau", 2.0 + i + step / 10, 1000 + step, step) for step in (0, 5, 10)]
            metrics += [Metric("tf/accept:3", float("nan") if i == 3 else 0.5 * i, 2000, 10)]
            client.log_batch(rid, metrics=metrics, params=[Param("lr", str(1e-3 * (i + 1))), Param("window", "aligned")],
                             tags=[RunTag("seed", str(i))])
            if i in (0, 2):  # two runs' evaluation items: their artifact, read through each client
                log_metrics(client, rid, {"tf/tau": 0.5, "jack/tf/tau@g0": 0.4 + i, "jack/tf/tau@g1": 0.6,
                                          "split/eval_batches": 2.0}, 10)
            if i < 4:
                client.set_terminated(rid, ["FINISHED", "FAILED", "FINISHED", "KILLED"][i])
        client.delete_run(rid)  # the last trial: deleted runs are not the sweep's
        client.create_run(eid, run_name="not a trial", tags={TRIAL_KEY_TAG: ""})
    client.delete_experiment(client.create_experiment("deleted sweep"))


def _same_runs(ours, theirs) -> None:
    assert [r.info.run_id for r in ours] == [r.info.run_id for r in theirs]  # MLflow's order, too
    for a, b in zip(ours, theirs):
        assert (a.info.run_name, a.info.status, a.info.start_time, a.info.end_time) == \
               (b.info.run_name, b.info.status, b.info.start_time, b.info.end_time)
        assert a.data.tags == b.data.tags and a.data.params == b.data.params
        assert a.data.metrics.keys() == b.data.metrics.keys()
        for k, v in b.data.metrics.items():
            assert (math.isnan(v) and math.isnan(a.data.metrics[k])) or a.data.metrics[k] == v, k


def assert_reads_alike(reader, client) -> None:
    """Every read the project makes gives the same through `reader` as through MLflow."""
    ours = reader.search_experiments(max_results=1000)
    theirs = client.search_experiments(max_results=1000)
    assert [(e.experiment_id, e.name, e.tags) for e in ours] == [(e.experiment_id, e.name, e.tags) for e in theirs]
    assert "deleted sweep" not in [e.name for e in ours]  # a deleted experiment is not listed
    assert reader.get_experiment_by_name("no such sweep") is None
    for name in ("alpha", "beta"):
        exp, ref = reader.get_experiment_by_name(name), client.get_experiment_by_name(name)
        assert (exp.experiment_id, exp.name, exp.tags) == (ref.experiment_id, ref.name, ref.tags)
        trials = sweep_trials(reader, exp.experiment_id, page_size=2)  # four pages
        _same_runs(trials, sweep_trials(client, ref.experiment_id))
        assert len(trials) == 6 and "not a trial" not in [r.info.run_name for r in trials]
        assert {r.info.status for r in trials} == {"FINISHED", "FAILED", "KILLED", "RUNNING"}
        assert trials[0].data.metrics["spec/tau"] in {2.0 + i + 1.0 for i in range(6)}  # the latest step
        items = [run_items(reader, r) for r in trials]
        assert items == [run_items(client, r) for r in sweep_trials(client, ref.experiment_id)]
        assert sorted(x.get("jack/tf/tau@g0", -1) for x in items) == [-1, -1, -1, -1, 0.4, 2.4]
        assert not any(k.startswith(("jack/", "split/")) for r in trials for k in r.data.metrics)
        _same_runs([sweep_parent(reader, exp.experiment_id)], [sweep_parent(client, ref.experiment_id)])


@pytest.fixture()
def store(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    populate(MlflowClient(uri))
    return uri, MlflowClient(uri)


def test_a_sql_store_is_read_by_mlflows_client_and_a_server_by_rest(tmp_path, store, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri, client = store
    reader = reading_client(uri)
    assert isinstance(reader, MlflowClient)  # no hand-made SQL: MLflow reads its own tables
    assert_reads_alike(reader, client)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert isinstance(reading_client(f"file://{tmp_path / 'mlruns'}"), MlflowClient)  # any other store
    assert isinstance(reading_client("https://mlflow.example.org"), RestReader)
    assert isinstance(reading_client("https://ada:pw@mlflow.example.org"), RestReader)  # requests sends those
    for setting, value in (("MLFLOW_TRACKING_INSECURE_TLS", "true"), ("MLFLOW_TRACKING_AUTH", "my_plugin"),
                           ("MLFLOW_WORKSPACE", "team-a")):  # what only MLflow's client speaks
        monkeypatch.setenv(setting, value)
        assert isinstance(reading_client("https://mlflow.example.org"), MlflowClient), setting
        monkeypatch.delenv(setting)


def test_filters_and_failures_are_one_line():
    assert parse_filter("tags.trial_key != ''") == ("trial_key", "!=", "")
    assert parse_filter("tags.`sweep_parent` = 'true'") == ("sweep_parent", "=", "true")
    with pytest.raises(ValueError, match="unsupported run filter"):
        parse_filter("metrics.x > 1")
    import socket

    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StoreReadError) as e:
        RestReader(f"http://127.0.0.1:{port}").search_experiments(max_results=1)
    assert "\n" not in str(e.value) and f"127.0.0.1:{port}" in str(e.value)


def test_credentials_are_mlflows(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ada")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret")
    assert _authorization(RestReader("http://h:1")) == "Basic YWRhOnMzY3JldA=="
    for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok")
    assert _authorization(RestReader("http://h:1")) == "Bearer tok"


def _authorization(reader: RestReader) -> str:
    """The Authorization header the reader's session sends."""
    import requests

    return reader.session.prepare_request(requests.Request("GET", "http://h:1/x")).headers["Authorization"]


class _Misbehaving:
    """A server in front of nothing, answering as broken proxies and wrong servers do: an
    HTML error page, an HTML 200, JSON that is not MLflow's, a 503 once, a 308 redirect."""

    def __init__(self):
        import http.server
        import threading

        self.hits: dict[str, int] = {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                path = self.path.split("/api/")[0]
                outer.hits[path] = outer.hits.get(path, 0) + 1
                if path == "/html500":
                    self._send(500, "<html>\n<body><h1>502 Bad Gateway</h1></body>\n</html>\n", "text/html")
                elif path == "/html200":
                    self._send(200, "<html><body>a login page</body></html>", "text/html")
                elif path == "/shape":
                    self._send(200, '{"experiments": [{"nom": "x"}]}')
                elif path == "/flaky" and outer.hits[path] == 1:
                    self._send(503, '{"error_code": "TEMPORARILY_UNAVAILABLE", "message": "busy"}')
                elif path == "/moved":
                    self.send_response(308)
                    self.send_header("Location", self.path.replace("/moved", "/flaky"))
                    self.end_headers()
                elif path == "/drip":  # a byte every 0.3 s: no single read waits long, the whole does
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    import time

                    for ch in "{" * 60:
                        try:
                            self.wfile.write(ch.encode())
                            self.wfile.flush()
                        except OSError:
                            return
                        time.sleep(0.3)
                elif path == "/endless":  # every page names a next one
                    self._send(200, '{"runs": [], "next_page_token": "%d"}' % outer.hits[path])
                elif path == "/repeat":  # the same next page, again and again
                    self._send(200, '{"runs": [], "next_page_token": "again"}')
                elif path == "/huge":  # a 70 MB answer, streamed without a length
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    try:
                        self.wfile.write(b'{"experiments": [' + b" " * (70 * 2 ** 20))
                    except OSError:
                        return
                else:
                    self._send(200, '{"experiments": [{"experiment_id": "0", "name": "Default", "tags": []}]}')

            def _send(self, code, body, kind="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_server_that_answers_wrongly_gets_one_line_and_a_busy_one_is_retried(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0.05")
    bad = _Misbehaving()
    try:
        for path, words in (("/html500", "HTTP 500 from"), ("/html200", "not MLflow's JSON"),
                            ("/shape", "lacks MLflow's fields")):
            with pytest.raises(StoreReadError) as e:
                RestReader(bad.url + path).search_experiments(max_results=1)
            assert words in str(e.value) and "\n" not in str(e.value) and "</html>" not in str(e.value), str(e.value)
        assert [x.name for x in RestReader(bad.url + "/flaky").search_experiments()] == ["Default"]
        assert bad.hits["/flaky"] == 2  # the 503 was retried, as MLflow's client retries it
        assert [x.name for x in RestReader(bad.url + "/moved").search_experiments()] == ["Default"]
        assert bad.hits["/moved"] == 1 and bad.hits["/flaky"] == 3  # the POST followed its 308
    finally:
        bad.server.shutdown()


def test_reads_from_a_server_are_bounded_in_time_pages_and_size(monkeypatch):
    """A server that drips its answer, pages that never end or repeat, an answer over the
    size a read takes: each ends in one line naming the server, within the bounds."""
    import time

    import trials.store.reader as reader_mod
    import trials.store.keys as keys_mod

    bad = _Misbehaving()
    try:
        monkeypatch.setattr(reader_mod, "READ_DEADLINE_S", 2.0)
        t0 = time.monotonic()
        with pytest.raises(StoreReadError) as e:
            RestReader(bad.url + "/drip").search_experiments(max_results=1)
        assert time.monotonic() - t0 < 10 and "took over 2 s in all" in str(e.value) and bad.url in str(e.value)
        monkeypatch.setattr(keys_mod, "MAX_PAGES", 20)
        with pytest.raises(StoreReadError, match="over 20 pages of runs"):
            sweep_trials(RestReader(bad.url + "/endless"), "1", page_size=1)
        assert bad.hits["/endless"] == 20
        with pytest.raises(StoreReadError, match="repeat a page token"):
            sweep_trials(RestReader(bad.url + "/repeat"), "1")
        assert bad.hits["/repeat"] == 2
        with pytest.raises(StoreReadError, match="over the 64 MiB a read takes") as e:
            RestReader(bad.url + "/huge").search_experiments(max_results=1)
        assert "\n" not in str(e.value)
    finally:
        bad.server.shutdown()


def test_a_sqlite_uri_names_its_file_as_sqlalchemy_reads_it(tmp_path):
    from trials.store.client import check_store, sqlite_path

    (tmp_path / "a b.db").write_bytes(b"")
    assert sqlite_path(f"sqlite:///{tmp_path}/a%20b.db?timeout=60") == tmp_path / "a b.db"
    check_store(f"sqlite:///{tmp_path}/a%20b.db")  # there: not refused as missing
    check_store(f"sqlite:///{tmp_path}/a b.db?timeout=60")
    with pytest.raises(ValueError, match="does not exist"):
        check_store(f"sqlite:///{tmp_path}/a%20c.db")


DRIFT = [("ALTER TABLE runs RENAME COLUMN status TO state", "no such column: runs.status"),
         ("ALTER TABLE runs DROP COLUMN end_time", "no such column: runs.end_time"),
         ("ALTER TABLE tags RENAME COLUMN value TO val", "no such column: tags.value"),
         ("DROP TABLE latest_metrics", "no such table: latest_metrics")]


def _altered(uri: str, tmp_path: Path, name: str, *sql: tuple) -> tuple[str, str]:
    """A copy of the store with `sql` run on it (a store altered by hand): (its URI, its path)."""
    import shutil
    import sqlite3

    path = tmp_path / name
    shutil.copyfile(uri[len("sqlite:///"):], path)
    with sqlite3.connect(path) as db:
        db.execute(*sql)
    return f"sqlite:///{path}", str(path)


def test_a_store_whose_schema_drifted_is_named_in_one_line(store, tmp_path, capsys):
    """A column of MLflow's tables renamed or dropped by hand: MLflow's client fails after
    logging pages of SQL tracebacks; `trials list` and `analysis report` each answer in one
    line naming the store and what MLflow found missing."""
    from analysis.cli import main as analysis
    from trials.cli import main as trials

    for i, (sql, words) in enumerate(DRIFT):
        uri, path = _altered(store[0], tmp_path, f"drift{i}.db", sql)
        assert trials(["list", "--tracking-uri", uri]) == 3
        assert analysis(["report", "alpha", "--tracking-uri", uri, "--no-log", "--out", str(tmp_path / "rep")]) == 3
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and all(f"{uri}:" in line and words in line for line in err), err
    assert not (tmp_path / "rep").exists()


def test_a_store_whose_schema_stopped_part_way_says_how_to_finish_it(store, tmp_path, capsys):
    """MLflow creates its tables migration by migration: a full disk stops it part way. The
    line names the migration it stopped at and MLflow's command that finishes it."""
    from trials.cli import main as trials

    uri, path = _altered(store[0], tmp_path, "partway.db", "UPDATE alembic_version SET version_num = '0584bdc529eb'")
    assert trials(["list", "--tracking-uri", uri]) == 3
    said = capsys.readouterr().err.strip()
    assert "\n" not in said and f"{uri}:" in said and "found version 0584bdc529eb" in said, said
    assert "mlflow db upgrade" in said, said


def test_a_metric_stored_as_text_names_the_store_the_run_and_the_metric(store, tmp_path, capsys):
    from analysis.cli import main as analysis

    reader = reading_client(store[0])
    run = next(r for r in sweep_trials(reader, reader.get_experiment_by_name("alpha").experiment_id)
               if r.data.tags[TRIAL_KEY_TAG] == "cell0")
    uri, path = _altered(store[0], tmp_path, "text.db", "UPDATE latest_metrics SET value = 'abc' WHERE run_uuid = ? "
                         "AND key = 'spec/tau'", (run.info.run_id,))
    assert analysis(["report", "alpha", "--tracking-uri", uri, "--no-log", "--out", str(tmp_path / "rep")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    said = f"run {run.info.run_id}: metric 'spec/tau' holds 'abc', not a number"
    assert len(err) == 1 and uri in err[0] and said in err[0], err
