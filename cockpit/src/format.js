/* Small display helpers shared by the page's sections. */

const VENDORS = { 0x10de: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x1af4: "Red Hat (virtio)" };

/** "NVIDIA (10de:1eb8)" from the Parent's VendorId/DeviceId. */
export function vendorName(vendorId, deviceId) {
    const hex = n => (n || 0).toString(16).padStart(4, "0");
    if (!vendorId)
        return "not a PCI device";
    return `${VENDORS[vendorId] || "vendor"} (${hex(vendorId)}:${hex(deviceId)})`;
}

/** A share in ppm as percent text; 0 (unset) as the `unset` text. */
export function percent(ppm, unset = "-") {
    if (!ppm)
        return unset;
    const value = ppm / 10000;
    return (Number.isInteger(value) ? value.toString() : value.toFixed(1)) + "%";
}

/** Percent text typed by the user ("", "25", "12.5%") to ppm; NaN when malformed. */
export function parsePercent(text) {
    const trimmed = String(text).trim().replace(/%$/, "");
    if (trimmed === "")
        return 0;
    const value = Number(trimmed);
    if (!Number.isFinite(value) || value < 0 || value > 100)
        return NaN;
    return Math.round(value * 10000);
}

/** The last path element, for labels of objects without a better name. */
export function basename(path) {
    return path.substring(path.lastIndexOf("/") + 1);
}
