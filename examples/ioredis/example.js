const Redis = require("ioredis");

// Where sluice listens: SLUICE_ADDR, or localhost:6380.
const [host, port] = (process.env.SLUICE_ADDR || "localhost:6380").split(":");
const redis = new Redis({ host, port: Number(port) });

async function main() {
  // 100 requests a minute, bursts of up to 21, for this user.
  const [allowed, limit, remaining, retryAfterMs] =
    await redis.call("RL.GCRA", "user:42", 20, 100, "1m");
  console.log(allowed ? `allowed: ${remaining} of ${limit} left`
                      : `limited: retry in ${retryAfterMs} ms`);

  // Weighted and pipelined: three checks, one round trip.
  const pipe = redis.pipeline();
  for (const cost of [5, 10, 10]) pipe.call("RL.TOKEN", "upload:42", 20, 10, "1s", cost);
  const results = await pipe.exec();
  console.log(results.map(([err, reply]) => (err ? err.message : reply[0]))); // [ 1, 1, 0 ]

  // redis-cell compatible.
  console.log(await redis.call("CL.THROTTLE", "user123", 15, 30, 60, 1)); // [ 0, 16, 15, -1, 2 ]
  redis.disconnect();
}

main().catch((err) => { console.error(err); process.exit(1); });
