/*
 * The page: GPUs, instances, create, scheduling, jobs - or, when the service cannot be
 * reached, an empty state saying how to start it. Re-renders on every change the Service
 * model reports (coalesced per frame); `data-state` on the root tells tests where it is.
 */

import React, { useEffect, useState } from "react";
import { Alert, Button, EmptyState, EmptyStateBody, EmptyStateFooter, PageSection, Spinner, Title } from "@patternfly/react-core";
import { ACTION } from "./service.js";
import { Gpus } from "./gpus.jsx";
import { Instances } from "./instances.jsx";
import { Create } from "./create.jsx";
import { Scheduling } from "./scheduling.jsx";
import { Jobs } from "./jobs.jsx";

function Unreachable({ service }) {
    return (
        <EmptyState titleText="The vGPU service is not reachable" headingLevel="h1" id="unreachable">
            <EmptyStateBody>
                <p>{service.problem}</p>
                <p>Start it with <code>systemctl start mdev-manager</code> (package mdev-manager), or try the simulated host with <code>./scripts/demo --web</code> from the source tree.</p>
                <p>The page connects again by itself when the service appears on the system bus.</p>
            </EmptyStateBody>
            <EmptyStateFooter><Button variant="secondary" onClick={() => service.load()}>Try again</Button></EmptyStateFooter>
        </EmptyState>
    );
}

function ReadOnlyNotice({ service }) {
    const denied = Object.values(ACTION).filter(action => !service.allowed(action));
    if (denied.length === 0)
        return null;
    return (
        <Alert isInline variant="info" id="read-only" title="Read-only: you may look but not change">
            {`Not granted without authentication: ${denied.map(a => `${a} (${service.permissions[a] || "unknown"})`).join(", ")}. Turn on administrative access to manage vGPUs.`}
        </Alert>
    );
}

export function App({ service }) {
    const [, setVersion] = useState(service.version);
    useEffect(() => service.onChange(setVersion), [service]);
    useEffect(() => {
        if (service.state === "ready" && window.mdevManager.firstReadyRender === undefined)
            window.mdevManager.firstReadyRender = performance.now();
    });

    let body;
    if (service.state === "connecting")
        body = <Spinner aria-label="Connecting to the service" />;
    else if (service.state === "unreachable")
        body = <Unreachable service={service} />;
    else {
        body = (
            <>
                <ReadOnlyNotice service={service} />
                <Gpus service={service} />
                <Instances service={service} />
                <Create service={service} />
                <Scheduling service={service} />
                <Jobs service={service} />
            </>
        );
    }
    return (
        <div className="mdev-page">
            <PageSection id="mdev-manager" data-state={service.state}>
                <Title headingLevel="h1">vGPUs</Title>
                {body}
            </PageSection>
        </div>
    );
}
