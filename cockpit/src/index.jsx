/* Entry point: the Service model and the React root. `window.mdevManager` is for tests and the benchmark. */

/* global cockpit */

import React from "react";
import { createRoot } from "react-dom/client";
import "@patternfly/react-core/dist/styles/base.css";
import "./page.css";
import { Service } from "./service.js";
import { App } from "./app.jsx";

window.mdevManager = { started: performance.now() };
// When Cockpit's channel to the bridge is up (the benchmark splits the load time with it).
cockpit.transport.wait(() => { window.mdevManager.transportReady = performance.now() });
document.addEventListener("DOMContentLoaded", () => {
    const service = new Service();
    window.mdevManager.service = service;
    createRoot(document.getElementById("app")).render(<App service={service} />);
});
