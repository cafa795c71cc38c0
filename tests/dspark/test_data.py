import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dspark.data import build_corpus, load_documents


def test_default_corpus_is_the_stdlib():
    docs = load_documents(())
    names = {n for n, _ in docs}
    assert "json/decoder.py" in names and len(docs) > 100


def test_splits_are_by_document_and_deterministic(corpus_dir):
    a = build_corpus([str(corpus_dir)])
    b = build_corpus([str(corpus_dir / "*.py")])
    assert a.sha256 == b.sha256
    assert a.n_docs["val"] >= 1 and a.n_docs["calib"] >= 1
    assert sum(a.n_docs.values()) == 60
    # every document lies wholly in one split
    docs = load_documents([str(corpus_dir)])
    for _, body in docs:
        hits = [s for s in ("train", "val", "calib") if body in bytes(getattr(a, s).numpy())]
        assert len(hits) == 1


def test_content_hash_changes_with_content(corpus_dir, tmp_path):
    for p in sorted(corpus_dir.glob("*.py"))[:5]:
        (tmp_path / p.name).write_bytes(p.read_bytes())
    h1 = build_corpus([str(tmp_path)]).sha256
    first = sorted(tmp_path.glob("*.py"))[0]
    first.write_bytes(first.read_bytes() + b"#")
    assert build_corpus([str(tmp_path)]).sha256 != h1


def test_parquet_text_column(tmp_path):
    texts = [f"document number {i} " * 40 for i in range(30)]
    pq.write_table(pa.table({"text": texts, "id": list(range(30))}), tmp_path / "d.parquet")
    c = build_corpus([str(tmp_path / "d.parquet")])
    assert sum(c.n_docs.values()) == 30
    with pytest.raises(ValueError, match="has no column 'body'"):
        build_corpus([str(tmp_path / "d.parquet")], text_column="body")


def test_too_small_corpus_is_refused(tmp_path):
    for i in range(3):
        (tmp_path / f"{i}.txt").write_text("tiny")
    with pytest.raises(ValueError, match=r"split holds \d+ bytes .* need at least 129"):
        build_corpus([str(tmp_path)], min_len=129)


def test_missing_source_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is not a file, folder or glob that exists"):
        build_corpus([str(tmp_path / "nope.txt")])
    with pytest.raises(ValueError, match="matches no file"):
        build_corpus([str(tmp_path / "*.zzz")])


def test_a_single_large_file_is_cut_into_documents(tmp_path):
    """One 142 KB text file was refused ("val split holds 0 bytes"); it is now cut into
    16 KiB chunks that split like documents, the same way every time."""
    import sysconfig
    from pathlib import Path

    from dspark.data import CHUNK_BYTES

    src = Path(sysconfig.get_paths()["stdlib"]) / "_pydecimal.py"
    (tmp_path / "one.txt").write_bytes(src.read_bytes()[:142_000])
    a = build_corpus([str(tmp_path / "one.txt")], min_len=129)
    assert sum(a.n_docs.values()) == -(-142_000 // CHUNK_BYTES)
    assert a.n_docs["val"] >= 1 and a.n_docs["calib"] >= 1 and len(a.val) >= 129
    assert build_corpus([str(tmp_path / "one.txt")], min_len=129).sha256 == a.sha256


def test_a_corpus_that_is_not_text_is_refused_and_a_partly_binary_one_warned(tmp_path):
    import warnings

    bins = tmp_path / "bins"
    bins.mkdir()
    for i in range(3):
        (bins / f"{i}.bin").write_bytes(bytes(range(256)) * 400)
    with pytest.raises(ValueError, match=r"data: \d+% of the corpus's bytes are not text"):
        build_corpus([str(bins)])
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for i in range(25):
        (mixed / f"{i}.txt").write_text(f"plain text number {i}\n" * 200)
    (mixed / "blob.bin").write_bytes(bytes(range(32)) * 1000)  # about 7% of the bytes
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        build_corpus([str(mixed)], min_len=64)
    assert any("of the corpus's bytes are not text" in str(x.message) for x in w)


def test_the_same_corpus_elsewhere_has_the_same_hash_and_split(corpus_dir, tmp_path):
    """Documents are named relative to their source, so a corpus copied to another place
    (another machine's mount, another test's temp folder) splits and hashes the same."""
    import shutil

    moved = tmp_path / "elsewhere" / "deeper"
    shutil.copytree(corpus_dir, moved)
    a, b = build_corpus((str(corpus_dir),)), build_corpus((str(moved),))
    assert a.sha256 == b.sha256 and a.n_docs == b.n_docs
    assert all(bool((a_s == b_s).all()) for a_s, b_s in ((a.train, b.train), (a.val, b.val)))
    by_glob = build_corpus((str(moved / "*.py"),))
    assert by_glob.sha256 == a.sha256
    names = [n for n, _ in load_documents((str(moved),))]
    assert names and all("/" not in n and n.endswith(".py") for n in names)
    table = pa.table({"text": ["alpha " * 20, "beta " * 20]})
    for where in (tmp_path / "p1", tmp_path / "p2" / "q"):
        where.mkdir(parents=True)
        pq.write_table(table, where / "docs.parquet")
    assert load_documents((str(tmp_path / "p1" / "docs.parquet"),)) == \
        load_documents((str(tmp_path / "p2" / "q" / "docs.parquet"),))


def _texts(folder, n=30):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"doc{i:02d}.txt").write_text(f"text number {i} " * 50)


def test_a_symlink_loop_is_not_followed_and_no_text_lands_in_two_splits(tmp_path):
    import os

    _texts(tmp_path / "loop")
    os.symlink("..", tmp_path / "loop" / "again")  # loop/again/loop/again/... -> loop
    for source in (str(tmp_path / "loop" / "**" / "*.txt"), str(tmp_path / "loop")):
        c = build_corpus([source])
        assert sum(c.n_docs.values()) == 30 and c.duplicates == 0
        streams = {s: bytes(getattr(c, s).numpy()) for s in ("train", "val", "calib")}
        for i in range(30):
            body = f"text number {i} " * 50
            assert sum(body.encode() in streams[s] for s in streams) == 1  # no leak into validation
    # a symlinked folder that is not a loop is still read, once
    _texts(tmp_path / "real", 25)
    (tmp_path / "top").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "top" / "linked")
    assert sum(build_corpus([str(tmp_path / "top" / "**" / "*.txt")]).n_docs.values()) == 25


def test_documents_with_the_same_bytes_are_kept_once_and_counted(tmp_path):
    _texts(tmp_path / "a")
    (tmp_path / "a" / "copy.txt").write_bytes((tmp_path / "a" / "doc03.txt").read_bytes())
    with pytest.warns(UserWarning, match="1 duplicate document"):
        c = build_corpus([str(tmp_path / "a"), str(tmp_path / "a" / "doc05.txt")])  # doc05 given twice too
    assert sum(c.n_docs.values()) == 30 and c.duplicates == 1


def test_corpus_errors_name_the_file(tmp_path):
    import os

    _texts(tmp_path / "names", 25)
    odd = os.path.join(os.fsencode(tmp_path / "names"), b"caf\xe9.txt")  # a Latin-1 name, not UTF-8
    with open(odd, "wb") as f:
        f.write(b"a text under a name that is not UTF-8 " * 20)
    c = build_corpus([str(tmp_path / "names")])  # read, not refused
    assert sum(c.n_docs.values()) == 26
    pq.write_table(pa.table({"text": list(range(30))}), tmp_path / "ints.parquet")
    with pytest.raises(ValueError, match=r"ints.parquet column 'text' holds int64, not text"):
        build_corpus([str(tmp_path / "ints.parquet")])
    (tmp_path / "fake.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match=r"fake.parquet is not a readable parquet file"):
        build_corpus([str(tmp_path / "fake.parquet")])
    if os.geteuid() != 0:  # root reads any file
        locked = tmp_path / "names" / "doc00.txt"
        locked.chmod(0)
        with pytest.raises(ValueError, match=r"cannot read .*doc00.txt"):
            build_corpus([str(tmp_path / "names")])
