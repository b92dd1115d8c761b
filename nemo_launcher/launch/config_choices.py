"""What conf/ offers a user (groups, configs per group, top-level configs) and the nearest of them to a typo.

Imported only for --help or once cli.py found a name that does not exist, so a run that is spelt right never
pays for it or for difflib.
"""

import difflib
import os

from .errors import ConfigError, config_error

HELP_HINT = "python3 main.py --help"
# difflib's similarity (0..1) above which a choice counts as close; its own get_close_matches default.
CLOSE = 0.6


def groups(conf_dir: str) -> list[str]:
    """Config groups a user picks from: folders of conf/, less internal ones (`_family`) and Hydra's."""
    return sorted(
        name
        for name in os.listdir(conf_dir)
        if os.path.isdir(os.path.join(conf_dir, name)) and not name.startswith(("_", ".")) and name != "hydra"
    )


def configs_of(conf_dir: str, group: str) -> list[str]:
    """`family/name` of every YAML file under conf/<group>/ (just `name` at its top), sorted; `_` ones left out."""
    root = os.path.join(conf_dir, group)
    configs = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if not name.startswith(("_", "."))]
        family = os.path.relpath(folder, root).replace(os.sep, "/")
        for file in files:
            if file.endswith(".yaml") and not file.startswith("_"):
                name = file[: -len(".yaml")]
                configs.append(name if family == "." else f"{family}/{name}")
    return sorted(configs)


def primary_configs(conf_dir: str) -> list[str]:
    """Names --config-name accepts: the YAML files at the top of conf/."""
    return sorted(file[: -len(".yaml")] for file in os.listdir(conf_dir) if file.endswith(".yaml"))


def nearest(word: str, choices: list[str], close_only: bool = False) -> list[str]:
    """Up to three choices most like word, most alike first: the close ones, or else (unless close_only) the best."""

    def likeness(choice: str) -> float:
        # `training=5b` should find gpt3/5b: without a family in the word, compare the name alone too.
        names = (choice,) if "/" in word else (choice, choice.rsplit("/", 1)[-1])
        return max(difflib.SequenceMatcher(None, word, name).ratio() for name in names)

    scored = sorted(((likeness(choice), choice) for choice in choices), key=lambda pair: -pair[0])
    close = [choice for score, choice in scored if score >= CLOSE]
    return (close if close or close_only else [choice for _, choice in scored])[:3]


def no_such_config(key: str, value: str, choices: list[str], listing: str) -> ConfigError:
    """`key='value': no such config; nearest: a, b (all ... : python3 main.py --help)`."""
    return _no_such(key, value, "config", nearest(value, choices), listing)


def no_such_group(key: str, value: str, group: str, conf_dir: str) -> ConfigError | None:
    """The error for a key whose group looks misspelt, or None when it is near none (Hydra then names the key)."""
    near = nearest(group, groups(conf_dir), close_only=True)
    return _no_such(key, value, "config group", near, "all groups") if near else None


def _no_such(key: str, value: str, what: str, near: list[str], listing: str) -> ConfigError:
    nearest_text = f"; nearest: {', '.join(near)}" if near else ""
    return config_error(key, value, f"no such {what}{nearest_text} ({listing}: {HELP_HINT})")


def path_given_as_config(key: str, value: str, group: str, conf_dir: str) -> ConfigError:
    """A file path where a config name belongs (`training=conf/training/gpt3/5b.yaml`): the name it meant, if the
    path is inside conf/<group>/, and where a config of one's own goes."""
    group_dir = os.path.realpath(os.path.join(conf_dir, group))
    path = os.path.realpath(os.path.expanduser(value))
    if not os.path.isabs(os.path.expanduser(value)) and value.startswith("conf/"):
        path = os.path.realpath(os.path.join(os.path.dirname(conf_dir), value))
    name = os.path.relpath(path, group_dir)[: -len(".yaml")] if path.endswith(".yaml") else None
    if name is not None and not name.startswith("..") and name in configs_of(conf_dir, group):
        fix = f"name it without folder or suffix: {key}={name}"
    else:
        close = nearest(os.path.basename(value).removesuffix(".yaml"), configs_of(conf_dir, group))
        fix = (
            f"a config of your own goes in conf/{group}/<family>/<name>.yaml and is picked as {key}=<family>/<name>"
            + (f" (nearest existing: {', '.join(close)})" if close else "")
        )
    return config_error(key, value, f"a config group takes a config name, not a file path; {fix}")
