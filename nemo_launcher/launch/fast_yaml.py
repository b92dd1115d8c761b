"""Config files parsed by libyaml instead of PyYAML's pure-Python parser.

Hydra reads every config file through OmegaConf's YAML loader, a subclass of yaml.SafeLoader; parsing is
about a quarter of composing the launcher's configs, and libyaml does it several times faster. The loader
installed here keeps OmegaConf's rules (its float syntax, no timestamps, duplicate keys refused, Path tags) on
top of libyaml's parser; tests compose every shipped config both ways and require identical results.
Without libyaml nothing changes.
"""

import yaml


def _fast_loader_class(python_loader):
    class FastOmegaConfLoader(yaml.CSafeLoader):
        def construct_mapping(self, node, deep=False):
            keys = set()
            for key_node, _ in node.value:
                if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    continue
                if key_node.value in keys:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key_node.value}",
                        key_node.start_mark,
                    )
                keys.add(key_node.value)
            return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)

    # Tag resolution and constructors run in Python even with the C parser: take OmegaConf's as they are.
    FastOmegaConfLoader.yaml_implicit_resolvers = {
        key: list(value) for key, value in python_loader.yaml_implicit_resolvers.items()
    }
    FastOmegaConfLoader.yaml_constructors = dict(python_loader.yaml_constructors)
    return FastOmegaConfLoader


def install_fast_yaml_loader() -> bool:
    """Makes OmegaConf (and so Hydra) parse YAML with libyaml; returns whether it could."""
    if not getattr(yaml, "__with_libyaml__", False):
        return False
    from omegaconf import _utils, basecontainer

    if getattr(_utils.get_yaml_loader, "fast", False):
        return True
    loader = _fast_loader_class(_utils.get_yaml_loader())

    def get_yaml_loader():
        return loader

    get_yaml_loader.fast = True
    _utils.get_yaml_loader = get_yaml_loader
    basecontainer.get_yaml_loader = get_yaml_loader
    return True
