// Shared by the SDK drivers (anthropic-sdk/drive.mjs, openai-sdk/drive.mjs):
// runs one call and prints one JSON object, what the SDK returned, or the
// API error it raised as describe(err) says, and how long the call took
// (retries included). Any other error fails the process.
export function report(call, describe) {
  const start = performance.now();
  call().then(
    (out) => out,
    (err) => {
      const out = describe(err);
      if (!out) throw err;
      return out;
    },
  ).then(
    (out) => { process.stdout.write(JSON.stringify({ ...out, elapsedMs: performance.now() - start }) + '\n'); },
    (err) => { process.stderr.write(String(err?.stack ?? err) + '\n'); process.exit(1); },
  );
}
