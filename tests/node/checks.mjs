// What the client scripts share: a failed check or a wait past its bound ends the script with
// a clear error.

export function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
}

export function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
