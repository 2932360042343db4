/* A button that is disabled, with the reason shown, when the caller lacks a polkit action. */

import React from "react";
import { Button, Tooltip } from "@patternfly/react-core";

/**
 * `denial` is the reason text ("" when allowed). isAriaDisabled keeps the tooltip working
 * on a disabled button; the reason is also in the title for tests and screen readers.
 */
export function GuardedButton({ denial, children, ...props }) {
    if (!denial)
        return <Button {...props}>{children}</Button>;
    return (
        <Tooltip content={denial}>
            <Button {...props} isAriaDisabled title={denial} data-denied="true">{children}</Button>
        </Tooltip>
    );
}
