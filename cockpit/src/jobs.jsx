/* Jobs: running jobs with their state and cancel, and how the last ones ended (Manager.JobRemoved). */

import React, { useEffect, useState } from "react";
import { Alert, Title } from "@patternfly/react-core";
import { Table, Tbody, Td, Th, Thead, Tr } from "@patternfly/react-table";
import { ACTION, IFACE, errorKind, options } from "./service.js";
import { basename } from "./format.js";
import { GuardedButton } from "./permission.jsx";

/* global cockpit */

export function Jobs({ service }) {
    const [uid, setUid] = useState(null);
    const [error, setError] = useState(null);
    useEffect(() => { cockpit.user().then(user => setUid(user.id)) }, []);
    const jobs = service.all(IFACE.job).sort((a, b) => a[0].localeCompare(b[0]));
    const cancel = path => service.call(path, IFACE.job, "Cancel", [options({})], "a{sv}").then(() => setError(null), setError);
    return (
        <section id="jobs">
            <Title headingLevel="h2">Jobs</Title>
            {error && <Alert isInline variant="danger" title={errorKind(error) || "Error"}>{error.message}</Alert>}
            {jobs.length === 0 && <p className="mdev-empty">No job is running.</p>}
            {jobs.length > 0 &&
                <Table aria-label="Jobs" variant="compact" id="job-table">
                    <Thead><Tr><Th>Job</Th><Th>Operation</Th><Th>Acts on</Th><Th>Started by uid</Th><Th>State</Th><Th screenReaderText="Cancel" /></Tr></Thead>
                    <Tbody>
                        {jobs.map(([path, job]) => {
                            // Its starter may always cancel; anyone else needs the operation's action.
                            const denial = job.StartedByUid === uid ? "" : service.denial(ACTION.manageInstances);
                            return (
                                <Tr key={path} data-job={path}>
                                    <Td>{basename(path)}</Td>
                                    <Td>{job.Operation}</Td>
                                    <Td>{(job.Objects || []).map(basename).join(", ")}</Td>
                                    <Td>{job.StartedByUid}</Td>
                                    <Td>{job.Finished ? (job.Success ? "done" : `failed: ${job.Message}`) : "running"}</Td>
                                    <Td isActionCell>
                                        {job.Cancelable && !job.Finished &&
                                            <GuardedButton variant="secondary" size="sm" className="job-cancel" denial={denial} onClick={() => cancel(path)}>Cancel</GuardedButton>}
                                    </Td>
                                </Tr>
                            );
                        })}
                    </Tbody>
                </Table>}
            {service.recentJobs.length > 0 &&
                <ul id="recent-jobs">
                    {service.recentJobs.map(j => <li key={j.path} data-result={j.result}>{`job ${basename(j.path)}: ${j.result}${j.message ? ` - ${j.message}` : ""}`}</li>)}
                </ul>}
        </section>
    );
}
