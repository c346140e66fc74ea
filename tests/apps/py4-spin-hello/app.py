# Spin 4's Python SDK (spin-sdk 4.0.0, the `http-py` template of spin-python-sdk v4.0.0):
# an async handler built with `componentize-py -w spin:up/http-trigger@4.0.0`, so the
# component exports only `wasi:http/handler@0.3.0-rc-2026-03-15` (WASIp3).
from spin_sdk.http import Handler, Request, Response


class HttpHandler(Handler):
    async def handle_request(self, request: Request) -> Response:
        if request.uri == "/echo" or request.uri.startswith("/echo?"):
            return Response(
                200,
                {"content-type": request.headers.get("content-type", "application/octet-stream")},
                request.body,
            )
        return Response(
            200,
            {"content-type": "text/plain"},
            bytes("Hello from Python!", "utf-8")
        )
