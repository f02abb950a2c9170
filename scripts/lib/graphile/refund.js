// The graphile-worker task of scripts/bench-outbox: the same idempotent
// refund call opgate's outbox makes (form-encoded, Idempotency-Key, bearer
// secret key) to the payment simulator. A job succeeds on a 2xx; anything
// else throws, and graphile-worker retries it. Prints one line per job:
// "done ENQUEUED_MS FINISHED_MS".
"use strict";
const http = require("http");

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

module.exports = async (payload) => {
  const body = new URLSearchParams({
    payment_intent: payload.payment_intent,
    amount: String(payload.amount),
    reason: "requested_by_customer",
    "metadata[operation_key]": payload.key,
  }).toString();
  await new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port: payload.port,
        path: "/v1/refunds",
        method: "POST",
        agent,
        headers: {
          Authorization: "Bearer " + payload.secret_key,
          "Content-Type": "application/x-www-form-urlencoded",
          "Content-Length": Buffer.byteLength(body),
          "Idempotency-Key": payload.key,
        },
      },
      (res) => {
        let text = "";
        res.on("data", (chunk) => (text += chunk));
        res.on("end", () =>
          res.statusCode < 300 ? resolve(text) : reject(new Error(`${res.statusCode} ${text}`)),
        );
      },
    );
    req.setTimeout(5000, () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end(body);
  });
  console.log(`done ${payload.enqueued_ms} ${Date.now()}`);
};
