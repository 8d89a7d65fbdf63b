import os

import redis

# Where sluice listens: SLUICE_ADDR, or localhost:6380.
host, _, port = os.environ.get("SLUICE_ADDR", "localhost:6380").rpartition(":")
r = redis.Redis(host=host, port=int(port))

# 100 requests a minute, bursts of up to 21, for this user.
allowed, limit, remaining, retry_after_ms, reset_after_ms = r.execute_command(
    "RL.GCRA", "user:42", 20, 100, "1m")
if allowed:
    print(f"allowed: {remaining} of {limit} left")
else:
    print(f"limited: retry in {retry_after_ms} ms")

# Weighted and pipelined: three checks, one round trip. transaction=False,
# because redis-py's default pipeline wraps its commands in MULTI/EXEC,
# which Sluice does not offer: each decision is atomic by itself, and limits
# that must admit a request together belong in one policy (limits: [...]).
pipe = r.pipeline(transaction=False)
for cost in (5, 10, 10):
    pipe.execute_command("RL.TOKEN", "upload:42", 20, 10, "1s", cost)
print([reply[0] for reply in pipe.execute()])  # [1, 1, 0]

# redis-cell compatible.
print(r.execute_command("CL.THROTTLE", "user123", 15, 30, 60, 1))  # [0, 16, 15, -1, 2]
