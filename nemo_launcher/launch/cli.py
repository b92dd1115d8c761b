"""The command line before Hydra reads it: our own --help page, and config names checked against conf/.

    python3 main.py --help
    python3 main.py training=gpt3/5bb   # Error: training='gpt3/5bb': no such config; nearest: gpt3/5b, ...

main.py calls check_command_line(sys.argv) before hydra.main. Every run imports and compiles this module, so it
stays small and loads only os and sys; the help page and the nearest-name search are modules of their own,
imported on --help or a typo only. What Hydra does itself (--hydra-help, --cfg, -m, dotted keys, top-level
keys, its own groups) passes through untouched.
"""

import os
import sys

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf")

# Hydra's options (hydra/_internal/utils.py, get_args_parser), short spelling -> long spelling.
_LONG_OPTION = {
    "-h": "--help",
    "-c": "--cfg",
    "-p": "--package",
    "-r": "--run",
    "-m": "--multirun",
    "-sc": "--shell-completion",
    "-cp": "--config-path",
    "-cn": "--config-name",
    "-cd": "--config-dir",
    "-i": "--info",
}
# Options whose next word is their value, not an override (--info's value is optional).
_TAKES_VALUE = {"--cfg", "--package", "--config-path", "--config-name", "--config-dir", "--experimental-rerun"}
_INFO_CHOICES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}
# With these Hydra prints a page of its own, or reads configs from somewhere other than conf/: leave all to it.
_HYDRA_ONLY = {
    "--hydra-help",
    "--version",
    "--shell-completion",
    "--config-path",
    "--config-dir",
    "--experimental-rerun",
}
# The characters of a plain choice list (`gpt3/5b,gpt3/126m`). Anything else (sweep functions, globs, lists,
# interpolations, quotes) is Hydra's grammar, which we do not second-guess.
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./,")


def check_command_line(argv: list[str], conf_dir: str = CONF_DIR) -> None:
    """--help/-h: print our help page, exit 0. A config name that conf_dir lacks: print one line, exit 2."""
    options, overrides = read_command_line(argv[1:])
    if _HYDRA_ONLY.intersection(options) or any(o.lstrip("+").startswith("hydra.searchpath") for o in overrides):
        return
    if "--help" in options:
        from .help_page import print_help_page

        print_help_page(conf_dir)
        sys.exit(0)
    problem = command_line_problem(options.get("--config-name"), overrides, conf_dir) or _secret_problem(overrides)
    if problem is not None:
        print(f"Error: {problem}", file=sys.stderr)
        sys.exit(problem.exit_code)


def _secret_problem(overrides: list[str]):
    """A secret given as an env value, or a credential in any value, on the command line is refused before Hydra
    runs, because Hydra itself writes the overrides of a sweep into <sweep dir>/multirun.yaml."""
    if not any("=" in override for override in overrides):
        return None
    from .secrets import secret_override

    return secret_override(overrides)


def read_command_line(args: list[str]) -> tuple[dict[str, str | None], list[str]]:
    """Splits Hydra's arguments into {long option: its value or None} and the overrides, as argparse would."""
    options: dict[str, str | None] = {}
    overrides: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--":
            overrides.extend(words)
            break
        if not word.startswith("-"):
            overrides.append(word)
            continue
        name, has_value, value = word.partition("=")
        name = _LONG_OPTION.get(name, name)
        if not has_value and name in _TAKES_VALUE:
            value = next(words, None)
        elif not has_value and name == "--info":
            value = next(words, None)
            if value is not None and value not in _INFO_CHOICES:
                overrides.append(value)
                value = None
        options[name] = value or None
    return options, overrides


def command_line_problem(config_name: str | None, overrides: list[str], conf_dir: str = CONF_DIR):
    """The ConfigError for the first config name on the command line that conf_dir lacks, or None."""
    if config_name is not None and not _yaml_exists(conf_dir, config_name):
        from .config_choices import no_such_config, primary_configs

        return no_such_config("--config-name", config_name, primary_configs(conf_dir), "all config names")
    for override in overrides:
        problem = _override_problem(override, config_name, conf_dir)
        if problem is not None:
            return problem
    return None


def _override_problem(override: str, config_name: str | None, conf_dir: str):
    key, has_value, value = override.partition("=")
    adding = key.startswith("+")
    group = key.lstrip("+").split("@", 1)[0]  # `group@package=choice` selects into another package
    if not has_value or not group or "." in group or group.startswith("~") or group.split("/")[0] == "hydra":
        return None  # values of keys, deletions, and Hydra's own groups (found in its packages)
    if os.path.isdir(os.path.join(conf_dir, group)):
        if not _PLAIN.issuperset(value):
            return None
        for choice in value.split(","):  # a -m sweep lists several choices
            exists = choice in ("", "null") or _yaml_exists(os.path.join(conf_dir, group), choice)
            if choice.startswith(("/", "./", "../", "conf/", "~")) or (choice.endswith(".yaml") and not exists):
                from .config_choices import path_given_as_config

                return path_given_as_config(key, choice, group, conf_dir)
            if not exists:
                from .config_choices import configs_of, no_such_config

                return no_such_config(key, choice, configs_of(conf_dir, group), f"all {group} configs")
        return None
    if adding or "/" in group or group in _top_level_keys(conf_dir, config_name):
        return None  # `+key=...` adds a key on purpose; a top-level key is an ordinary override
    from .config_choices import no_such_group

    return no_such_group(key, value, group, conf_dir)


def _yaml_exists(folder: str, name: str) -> bool:
    path = os.path.join(folder, name)
    return os.path.isfile(path if name.endswith(".yaml") else path + ".yaml")


def _top_level_keys(conf_dir: str, config_name: str | None) -> set[str]:
    """Keys at column 0 of config.yaml and of the --config-name file (our own YAML: block style)."""
    keys = set()
    for name in {"config", config_name or "config"}:
        path = os.path.join(conf_dir, name if name.endswith(".yaml") else name + ".yaml")
        if os.path.isfile(path):
            with open(path) as file:
                keys.update(line.split(":", 1)[0] for line in file if line[:1].isalpha() or line[:1] == "_")
    return keys
