"""Reading a WebDataset listing, wdinfo.pkl (jobs/multimodal/generate_wdinfo.py writes it): which tars, how many
examples each. Both sides read it: the image trainers list their shards from it, and the launcher counts a data
set from it without opening a tar (contract/epochs.py).

    listed_tars("/data/laion/wdinfo.pkl")   # [("/data/laion/00000.tar", 1000), ..., ("/data/laion/00042.tar", 17)]

The pickled dict holds `tar_files` (paths relative to the file's folder, each of `chunk_size` examples) and, for
shorter tars, `partial_tar_files` {path: examples}.
"""

import os
import pickle


def listed_tars(path: str) -> list[tuple[str, int]]:
    """(tar path, examples) of every tar the listing names, full ones first; ValueError (saying why) when the file
    cannot be read or is no such listing."""
    try:
        with open(path, "rb") as handle:
            info = pickle.load(handle)
        base = os.path.dirname(os.path.abspath(path))
        listed = [(tar, info["chunk_size"]) for tar in info["tar_files"]]
        listed += sorted(info.get("partial_tar_files", {}).items())
        return [(os.path.join(base, tar), int(examples)) for tar, examples in listed]
    except (OSError, EOFError, pickle.UnpicklingError, KeyError, TypeError, ValueError, AttributeError) as error:
        raise ValueError(f"{path} is no wdinfo.pkl of generate_wdinfo ({error})") from None
