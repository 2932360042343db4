/*
 * The libvirt <hostdev> element for an instance, spelled as `vgpuctl xml` writes it
 * (dbus-api/src/hostdev.rs): mdevs by UUID; VFs and pass-through GPUs by PCI address with
 * managed='no' (the service binds them, not libvirt), one element per IOMMU group member.
 */

function pciHostdev(address) {
    const match = /^([0-9a-fA-F]{4,}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$/.exec(address);
    if (!match)
        return `<!-- no PCI address for this instance: ${address || "none"} -->\n`;
    const hex = (text, digits) => "0x" + parseInt(text, 16).toString(16).padStart(digits, "0");
    return "<hostdev mode='subsystem' type='pci' managed='no'>\n  <source>\n" +
        `    <address domain='${hex(match[1], 4)}' bus='${hex(match[2], 2)}' slot='${hex(match[3], 2)}' function='${hex(match[4], 1)}'/>\n` +
        "  </source>\n</hostdev>\n";
}

/** The XML a domain needs for `instance` (Instance properties). */
export function hostdevXml(instance) {
    if (instance.Kind === "mdev") {
        return "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n  <source>\n" +
            `    <address uuid='${instance.Uuid.toLowerCase()}'/>\n  </source>\n</hostdev>\n`;
    }
    if (instance.Kind === "passthrough" && instance.GroupMembers && instance.GroupMembers.length > 0)
        return instance.GroupMembers.map(pciHostdev).join("");
    return pciHostdev(instance.PciAddress);
}
