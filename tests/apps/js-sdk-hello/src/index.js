// Spin http-js template (spin/templates/v3.6, router "itty"), with an echo route.
// For AutoRouter documentation refer to https://itty.dev/itty-router/routers/autorouter
import { AutoRouter } from 'itty-router';

let router = AutoRouter();

// Route ordering matters, the first route that matches will be used
// Any route that does not return will be treated as a middleware
// Any unmatched route will return a 404
router
    .get('/', () => new Response('Hello, Spin!'))
    .get('/echo/*', (request) => new Response(new URL(request.url).pathname))

addEventListener('fetch', (event) => {
    event.respondWith(router.fetch(event.request));
});
