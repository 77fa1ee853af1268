// Adds jobs 0..N-1 of task "noop", all due at T0, with graphile-worker's bulk addJobs
// (one add_jobs call per 10,000). Driven by `tickwheel bench peers` (bench/peers/systems.py).
// usage: node add.mjs <database url> <jobs> <t0 unix ms>
import { makeWorkerUtils } from "graphile-worker";

const CHUNK = 10_000;
const [url, jobsText, t0Text] = process.argv.slice(2);
const jobs = Number.parseInt(jobsText, 10);
const runAt = new Date(Number.parseInt(t0Text, 10));
const utils = await makeWorkerUtils({ connectionString: url });
try {
  for (let first = 0; first < jobs; first += CHUNK) {
    const specs = [];
    for (let i = first; i < Math.min(jobs, first + CHUNK); i++) {
      specs.push({ identifier: "noop", payload: { i }, runAt });
    }
    await utils.addJobs(specs);
  }
} finally {
  await utils.release();
}
