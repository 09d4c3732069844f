"""A stand-in for langchain_protocol.protocol: langchain-core imports its event types (TypedDicts
describing streamed message events) by name. Each name is a plain dict type here, which is what a
TypedDict is at run time; nothing in the tests' calls reads more of the module."""


def __getattr__(name: str) -> type:
    if name.startswith("__"):
        raise AttributeError(name)
    kind = type(name, (dict,), {})
    globals()[name] = kind
    return kind
