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

// A fetch that records the status of each resumption the client makes (a GET with
// Last-Event-ID), for a report to show that a stream was resumed.
export function watchingResumptions() {
  const resumptions = [];
  const watched = (input, init) => {
    const resuming = new Headers(init?.headers).has("last-event-id");
    return fetch(input, init).then((response) => {
      if (resuming) resumptions.push(response.status);
      return response;
    });
  };
  return { resumptions, fetch: watched };
}
