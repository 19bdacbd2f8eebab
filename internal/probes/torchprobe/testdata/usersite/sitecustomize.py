# The user's own sitecustomize: it must still run under the probe.
import os
import sys

os.environ["USER_SITECUSTOMIZE"] = "ran"
print("user sitecustomize ran", file=sys.stderr)
