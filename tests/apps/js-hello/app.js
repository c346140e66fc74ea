// A JavaScript HTTP component (StarlingMonkey via componentize-js): the size and
// compile cost of a real JS Spin app (about 13 MB, several seconds to compile).
addEventListener("fetch", (event) =>
  event.respondWith(new Response("hello from js\n", { status: 200 }))
);
