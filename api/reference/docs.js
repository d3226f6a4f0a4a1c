// Renders /api/openapi.json with the vendored Swagger UI. Loaded as a file (no inline script),
// so the page's Content-Security-Policy can forbid inline scripts. Requests made with
// "Try it out" are same-origin, so the signed-in session cookie goes with them.
"use strict";
(function () {
  var root = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: root.getAttribute("data-spec-url"),
    domNode: root,
    deepLinking: true,
    presets: [window.SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    validatorUrl: null,
    docExpansion: "none",
    defaultModelsExpandDepth: 0,
    displayOperationId: true,
    filter: true,
    tryItOutEnabled: false,
    persistAuthorization: false
  });
})();
