// One graphile-worker process on tickwheel's hot second, driven by `tickwheel bench peers`
// (bench/peers/systems.py).
// usage: node worker.mjs <database url> <records file> <ready file> <concurrency> <local queue> <poll ms>
//
// The "noop" task's first act appends a 12-byte record, little-endian (uint32 job index, int64
// unix microseconds), to an in-memory list written out every 100 ms and at the end; the harness
// counts runs by the file's size. Completions are batched (completeJobBatchDelay 0). The ready
// file is written once the runner has started; SIGTERM stops the runner gracefully.
import fs from "node:fs";
import { run } from "graphile-worker";

const [url, recordsPath, readyPath, concText, queueText, pollText] = process.argv.slice(2);
const concurrency = Number.parseInt(concText, 10);
const records = fs.openSync(recordsPath, "w");
let pending = [];

const writeOut = () => {
  if (pending.length > 0) {
    const data = Buffer.concat(pending);
    pending = [];
    fs.writeSync(records, data);
  }
};
const microsNow = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000));

const runner = await run({
  connectionString: url,
  concurrency,
  noHandleSignals: true,
  taskList: {
    noop: async (payload) => {
      const rec = Buffer.allocUnsafe(12);
      rec.writeUInt32LE(payload.i, 0);
      rec.writeBigInt64LE(microsNow(), 4);
      pending.push(rec);
    },
  },
  preset: {
    worker: {
      pollInterval: Number.parseInt(pollText, 10),
      maxPoolSize: concurrency + 1,
      localQueue: { size: Number.parseInt(queueText, 10) },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  },
});
const flusher = setInterval(writeOut, 100);
const version = JSON.parse(
  fs.readFileSync(new URL("./node_modules/graphile-worker/package.json", import.meta.url)),
).version;
fs.writeFileSync(readyPath, version);

let stopping = false;
process.on("SIGTERM", async () => {
  if (stopping) return;
  stopping = true;
  try {
    await runner.stop();
  } finally {
    clearInterval(flusher);
    writeOut();
    fs.closeSync(records);
    process.exit(0);
  }
});
