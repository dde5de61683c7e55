"""The files under pass/ and fail/ are read by type checkers (tests/test_static_typing.py), never
run: keep pytest (``--doctest-modules`` imports every module it collects) away from them."""

collect_ignore = ["pass", "fail"]
