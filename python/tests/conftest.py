"""pytest setup: the package under test is the installed one when LAZYATTN_TEST_INSTALLED=1
(after `pip install --no-build-isolation ./python`), else python/ of this checkout (with the
library from $LAZYATTN_LIB or build/*/capi)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if os.environ.get("LAZYATTN_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.dirname(HERE))
