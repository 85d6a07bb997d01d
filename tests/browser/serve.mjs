// Serves this folder (the pages and their client libraries) on a loopback
// port, as a web application would be served.
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";

/// Starts serving; returns the server and its port.
export async function serveFolder() {
  const site = createServer(async (request, response) => {
    try {
      const path = new URL(`.${new URL(request.url, "http://x").pathname}`, import.meta.url);
      response.end(await readFile(path));
    } catch {
      response.statusCode = 404;
      response.end();
    }
  });
  await new Promise((ready) => site.listen(0, "127.0.0.1", ready));
  return [site, site.address().port];
}
