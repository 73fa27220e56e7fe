// A search as the reader types (the experiment page's pickers: issue 43). Each call of the
// returned function with the text typed waits `delay` ms for the next keystroke; then `find`
// asks (lib/api.js searchKeys) and `onFound(q, found)` gets the answer, only the newest one's:
// an older answer that arrives late is dropped, so a slow search never overwrites a newer one.
// `timers` (setTimeout/clearTimeout) is given by the node tests (tests/js/key_search.test.js).

/**
 * @template T
 * @param {(q: string) => Promise<T>} find
 * @param {(q: string, found: T) => void} onFound
 * @param {{delay?: number, timers?: {setTimeout: Function, clearTimeout: Function}}} [opts]
 * @returns {(q: string) => void}
 */
export const typeahead = (find, onFound, {delay = 50, timers = globalThis} = {}) => {
  let timer = null;
  let ticket = 0;
  return (q) => {
    const mine = ++ticket;
    if (timer !== null) timers.clearTimeout(timer);
    timer = timers.setTimeout(async () => {
      timer = null;
      const found = await find(q);
      if (mine === ticket) onFound(q, found);
    }, delay);
  };
};

