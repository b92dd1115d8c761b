"""The CLIP (and Stable Diffusion) loader reads each example's members by their offsets in the tar: the examples it
finds are webdataset's own samples of the same tars, in order, incomplete ones left out."""

import io
import tarfile

from tests.conftest import require_module
from tests.jobs.vision_support import write_shape_tars

require_module("webdataset")


def test_indexed_examples_are_webdatasets_samples(tmp_path):
    from webdataset.tariterators import tarfile_samples

    from nemo_launcher.jobs.vision.shards import IMAGE_MEMBERS, ShardExamples, index_examples, list_shards, read_members

    write_shape_tars(tmp_path, examples=10, per_tar=10)
    (path,) = tmp_path.glob("*.tar")
    # A caption without an image and a key whose extensions are "y.jpg", "y.txt" (incomplete), a key in a folder.
    extra = (
        ("lonely.txt", b"no image"),
        ("sub/x.y.jpg", b"\xff\xd8"),
        ("sub/x.y.txt", b"dots"),
        ("sub/z.jpg", b"\xff\xd8"),
        ("sub/z.txt", b"in a folder"),
    )
    with tarfile.open(path, "a") as tar:
        for name, data in extra:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    expected = [{k: v for k, v in s.items() if k != "__url__"} for s in tarfile_samples([{"url": str(path)}])]
    expected = [s for s in expected if "txt" in s and any(k in s for k in IMAGE_MEMBERS)]
    with open(path, "rb") as handle:
        found = [read_members(handle, key, members) for key, members in index_examples(str(path))]
    assert [s["__key__"] for s in found] == [s["__key__"] for s in expected] and len(found) == 11
    assert found == expected
    shards = list_shards([str(path)], "key")
    dataset = ShardExamples(shards, length=22, seed=1, shuffle=True, encode=lambda members, n: members["__key__"])
    keys = [dataset[n] for n in range(22)]
    assert sorted(keys[:11]) == sorted(s["__key__"] for s in expected) and sorted(keys[11:]) == sorted(keys[:11])
