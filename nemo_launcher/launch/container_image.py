"""The `container` setting as pyxis reads it (`srun --container-image=<this>`).

    pyxis_image("nvcr.io/nvidia/nemo:24.01")    # "nvcr.io#nvidia/nemo:24.01"
    pyxis_image("/lustre/images/nemo.sqsh")     # unchanged: a squashfs file every node can read
    pyxis_image("./nemo.sqsh")                  # ConfigError: the job does not start in this directory

Pyxis hands a registry image to enroot, whose image syntax is `[USER@][REGISTRY#]IMAGE[:TAG]`: the registry is
whatever comes before a `#`. Written the way docker and the seed configs write it (`nvcr.io/nvidia/nemo:24.01`),
enroot looks for an image called `nvcr.io/nvidia/nemo` on Docker Hub, and the job fails on the compute node after
the queue wait. The registry is not in doubt, though: by docker's own reference grammar the first component of a
name is a registry host when it holds a `.` or a `:` or is `localhost`, so the launcher writes the `#` itself
rather than refusing a name every docker user would type. A relative squashfs path is refused instead: pyxis
opens it on the compute node, from the job's directory, and no rewrite here can know the user meant this one.
"""

import os
import sys
from pathlib import PurePosixPath

from .errors import config_error

SQUASHFS_SUFFIXES = (".sqsh", ".squashfs")


def _is_registry_host(component: str) -> bool:
    """Docker's rule for the first component of an image name."""
    return "." in component or ":" in component or component == "localhost"


def pyxis_image(container: str) -> str:
    """The image text for --container-image; raises ConfigError for a relative file path."""
    text = container.strip()
    if "://" in text or "#" in text or text.startswith("/"):
        return text  # an enroot URI, already pyxis's form, or an absolute squashfs file
    looks_like_file = text.startswith(("./", "../", "~")) or text.endswith(SQUASHFS_SUFFIXES)
    if looks_like_file:
        raise config_error(
            "container",
            container,
            "a container file must be an absolute path (pyxis opens it on the compute node, which does not start "
            f"in this directory), e.g. container={PurePosixPath('/path/to') / PurePosixPath(text).name}",
        )
    first, slash, rest = text.partition("/")
    if slash and _is_registry_host(first):
        return f"{first}#{rest}"
    return text  # a Docker Hub image (ubuntu:22.04, nvidia/cuda:12.4.1-base-ubuntu22.04)


def check_container_file(image: str, dry_run: bool) -> None:
    """A squashfs file (an absolute path) that this host cannot see is refused like any missing input (check_inputs:
    a dry run warns, a real run refuses), rather than failing every job when pyxis cannot open it on the node."""
    if not image.startswith("/") or os.path.exists(image):
        return
    message = (
        f"container={image!r}: no such file on this host, and pyxis opens it on the compute nodes: fix the path, or "
        "set check_inputs=false if only the compute nodes mount it"
    )
    if dry_run:
        print(f"Warning: a real run would refuse {message}", file=sys.stderr)
        return
    raise config_error("container", image, message.split(": ", 1)[1])
