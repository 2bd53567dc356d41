"""Synthetic stand-in for transformers.HfArgumentParser (tests only, used where transformers is not
installed): the same API and the same options as the real parser builds from a dataclass: `--name`
for each field (and `--name-with-dashes` for a name with underscores), booleans as
`type=string_to_bool, nargs="?", const=True`, `parse_args_into_dataclasses()` returning one instance
per dataclass."""

import argparse
import dataclasses


def string_to_bool(v):
    if isinstance(v, bool):
        return v
    if v.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if v.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"Truthy value expected: got {v}")


class HfArgumentParser(argparse.ArgumentParser):
    def __init__(self, dataclass_types, **kwargs):
        super().__init__(**kwargs)
        self.dataclass_types = list(dataclass_types) if isinstance(dataclass_types, (list, tuple)) else [dataclass_types]
        for dtype in self.dataclass_types:
            for field in dataclasses.fields(dtype):
                names = [f"--{field.name}"]
                if "_" in field.name:
                    names.append(f"--{field.name.replace('_', '-')}")
                if field.type in (bool, "bool"):
                    self.add_argument(*names, dest=field.name, type=string_to_bool, nargs="?", const=True, default=field.default)
                else:
                    kind = {"int": int, "float": float, "str": str}.get(field.type, field.type)
                    self.add_argument(*names, dest=field.name, type=kind, default=field.default)

    def parse_args_into_dataclasses(self, args=None):
        namespace, _ = self.parse_known_args(args=args)
        out = []
        for dtype in self.dataclass_types:
            keys = {f.name for f in dataclasses.fields(dtype)}
            out.append(dtype(**{k: v for k, v in vars(namespace).items() if k in keys}))
        return tuple(out)
