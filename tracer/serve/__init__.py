"""`tracer serve`: the classroom page as a local web server, where anyone in the room types a prompt
and sees every step of the real decoder (uvicorn + Starlette; everything served by the server
itself, nothing fetched from elsewhere).

`limits` (what one request may ask, and the request checked), `engine` (the models loaded once, a
bounded pool of worker threads, one trace's answer), `page` (the page with its prompt box,
`serve.js` and `serve.css`), `app` (the routes), `run` (the socket, uvicorn, the signals).
docs/serve.md tells the rest.
"""
