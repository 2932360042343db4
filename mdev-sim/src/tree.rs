//! The simulated sysfs/devtmpfs/procfs namespace: directories, attribute files and symbolic
//! links under host-absolute paths, with the kernel's path walk (links followed, `..`
//! resolved against the real parent, ELOOP after 40 links).

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// How many links one walk may follow before ELOOP (`MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;

/// A fast hasher for the tree's path keys. The keys are long and share long prefixes
/// (`/sys/devices/pci0000:10/0000:10:00.0/<uuid>/...`), which made the ordered map of the
/// first version spend most of a path walk comparing prefixes; a hash map needs one hash and
/// one comparison per step. Not DoS-resistant, which a simulated host does not need: its paths
/// come from its own topology and from tests.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PathHasher(u64);

impl Hasher for PathHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Eight bytes at a time: rotate, mix in, multiply by an odd constant.
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
        }
    }

    fn write_u8(&mut self, byte: u8) {
        // `str`'s Hash ends with a 0xff byte.
        self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// One entry of the namespace. `F` says how a file reads and writes.
#[derive(Debug, Clone)]
pub(crate) enum Node<F> {
    Dir(BTreeSet<String>),
    File(F),
    Link(String),
}

/// A namespace rooted at `/`, keyed by canonical absolute path.
#[derive(Debug, Clone)]
pub(crate) struct Tree<F> {
    nodes: HashMap<String, Node<F>, BuildHasherDefault<PathHasher>>,
}

/// Splits a canonical path into (parent, name). `/` has no parent.
fn split(path: &str) -> Option<(&str, &str)> {
    if path == "/" {
        return None;
    }
    let index = path.rfind('/')?;
    let parent = if index == 0 { "/" } else { &path[..index] };
    Some((parent, &path[index + 1..]))
}

/// Joins a canonical directory and a name.
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// The relative link text that leads from directory `from_dir` to `to` (both canonical),
/// the way sysfs writes its links (`../../../bus/pci/drivers/nvme`).
pub(crate) fn relative_link(from_dir: &str, to: &str) -> String {
    let mut from = from_dir.split('/').filter(|c| !c.is_empty()).peekable();
    let mut target = to.split('/').filter(|c| !c.is_empty()).peekable();
    // Past the components both share.
    while from.peek().is_some() && from.peek() == target.peek() {
        from.next();
        target.next();
    }
    let mut text = String::with_capacity(from_dir.len() + to.len());
    for part in from.map(|_| "..").chain(target) {
        if !text.is_empty() {
            text.push('/');
        }
        text.push_str(part);
    }
    text
}

impl<F> Tree<F> {
    /// An empty namespace holding only `/`.
    pub(crate) fn new() -> Self {
        let mut nodes: HashMap<String, Node<F>, BuildHasherDefault<PathHasher>> =
            HashMap::default();
        nodes.insert("/".to_string(), Node::Dir(BTreeSet::new()));
        Self { nodes }
    }

    /// The entry at a canonical path.
    pub(crate) fn get(&self, path: &str) -> Option<&Node<F>> {
        self.nodes.get(path)
    }

    /// The entry at a canonical path, for updating a file's stored value.
    pub(crate) fn get_mut(&mut self, path: &str) -> Option<&mut Node<F>> {
        self.nodes.get_mut(path)
    }

    fn attach(&mut self, path: &str) {
        if let Some((parent, name)) = split(path) {
            self.mkdir_p(parent);
            if let Some(Node::Dir(children)) = self.nodes.get_mut(parent) {
                children.insert(name.to_string());
            }
        }
    }

    /// Creates a directory and every missing ancestor.
    pub(crate) fn mkdir_p(&mut self, path: &str) {
        if matches!(self.nodes.get(path), Some(Node::Dir(_))) {
            return;
        }
        self.attach(path);
        self.nodes
            .insert(path.to_string(), Node::Dir(BTreeSet::new()));
    }

    /// Adds (or replaces) a file.
    pub(crate) fn add_file(&mut self, path: &str, file: F) {
        self.remove(path);
        self.attach(path);
        self.nodes.insert(path.to_string(), Node::File(file));
    }

    /// Adds (or replaces) a symbolic link with the given stored target text.
    pub(crate) fn add_link(&mut self, path: &str, target: impl Into<String>) {
        self.remove(path);
        self.attach(path);
        // Kept for the host's life (one per link, several per mdev): without the room a
        // built-up text has left over (`relative_link` reserves for the longest case).
        let mut target = target.into();
        target.shrink_to_fit();
        self.nodes.insert(path.to_string(), Node::Link(target));
    }

    /// Adds a link whose text is the relative path from the link's directory to `to`.
    pub(crate) fn add_relative_link(&mut self, path: &str, to: &str) {
        let dir = split(path).map(|(dir, _)| dir).unwrap_or("/");
        let text = relative_link(dir, to);
        self.add_link(path, text);
    }

    /// Removes an entry and everything below it. Missing entries are ignored.
    pub(crate) fn remove(&mut self, path: &str) {
        let Some(node) = self.nodes.remove(path) else {
            return;
        };
        if let Node::Dir(children) = node {
            for child in children {
                self.remove(&join(path, &child));
            }
        }
        if let Some((parent, name)) = split(path) {
            if let Some(Node::Dir(children)) = self.nodes.get_mut(parent) {
                children.remove(name);
            }
        }
    }

    /// Removes a directory if it has no entries left, then its empty ancestors up to (not
    /// including) `keep`.
    pub(crate) fn prune_empty(&mut self, path: &str, keep: &str) {
        let mut current = path.to_string();
        while current != keep && current != "/" {
            match self.nodes.get(&current) {
                Some(Node::Dir(children)) if children.is_empty() => {}
                _ => return,
            }
            self.remove(&current);
            match split(&current) {
                Some((parent, _)) => current = parent.to_string(),
                None => return,
            }
        }
    }

    /// Resolves a host-absolute path to the canonical path of an existing entry, following
    /// links in every component (and in the last one when `follow_last`). Errors are errnos.
    pub(crate) fn resolve(&self, path: &str, follow_last: bool) -> Result<String, i32> {
        let mut budget = MAX_SYMLINKS;
        self.walk("/", path, follow_last, &mut budget)
    }

    fn walk(
        &self,
        start: &str,
        path: &str,
        follow_last: bool,
        budget: &mut usize,
    ) -> Result<String, i32> {
        // One buffer for the whole walk (components are pushed and popped), and one lookup per
        // component: the kind of the entry `current` names is remembered from the step that
        // reached it (every entry's parent is a directory, so `..` always lands on one).
        let mut current = String::with_capacity(start.len() + path.len() + 1);
        current.push_str(if path.starts_with('/') { "/" } else { start });
        let mut current_is_dir = matches!(self.nodes.get(current.as_str()), Some(Node::Dir(_)));
        let mut components = path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .peekable();
        while let Some(component) = components.next() {
            let last = components.peek().is_none();
            if !current_is_dir {
                return Err(libc::ENOTDIR);
            }
            if component == ".." {
                match current.rfind('/') {
                    Some(0) => current.truncate(1),
                    Some(index) => current.truncate(index),
                    None => {}
                }
                continue;
            }
            let parent_len = current.len();
            if current != "/" {
                current.push('/');
            }
            current.push_str(component);
            match self.nodes.get(current.as_str()) {
                None => return Err(libc::ENOENT),
                Some(Node::Link(target)) if !last || follow_last => {
                    if *budget == 0 {
                        return Err(libc::ELOOP);
                    }
                    *budget -= 1;
                    current.truncate(parent_len);
                    current = self.walk(&current, target, true, budget)?;
                    current_is_dir = matches!(self.nodes.get(current.as_str()), Some(Node::Dir(_)));
                }
                Some(node) => current_is_dir = matches!(node, Node::Dir(_)),
            }
        }
        Ok(current)
    }

    /// Every entry, sorted, one line each: `path/` for directories, `path -> target` for
    /// links, `path` for files (the golden-file form of a topology).
    pub(crate) fn listing(&self) -> Vec<String> {
        let mut entries: Vec<(&String, &Node<F>)> = self
            .nodes
            .iter()
            .filter(|(path, _)| path.as_str() != "/")
            .collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        entries
            .into_iter()
            .map(|(path, node)| match node {
                Node::Dir(_) => format!("{path}/"),
                Node::Link(target) => format!("{path} -> {target}"),
                Node::File(_) => path.clone(),
            })
            .collect()
    }

    /// Canonical paths of every file, for reading all of them in tests.
    pub(crate) fn file_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, node)| matches!(node, Node::File(_)))
            .map(|(path, _)| path.clone())
            .collect();
        paths.sort();
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_links_match_sysfs_form() {
        assert_eq!(
            relative_link(
                "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
                "/sys/bus/pci/drivers/nvme"
            ),
            "../../../../bus/pci/drivers/nvme"
        );
        assert_eq!(
            relative_link("/sys/class/mdev_bus", "/sys/devices/virtual/mtty/mtty"),
            "../../devices/virtual/mtty/mtty"
        );
        assert_eq!(
            relative_link(
                "/sys/devices/pci0000:00/0000:00:01.0",
                "/sys/devices/pci0000:00/0000:00:01.1"
            ),
            "../0000:00:01.1"
        );
    }

    #[test]
    fn walk_follows_links_and_parent_components() {
        let mut tree: Tree<u8> = Tree::new();
        tree.add_file(
            "/sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-1/create",
            1,
        );
        tree.add_relative_link("/sys/class/mdev_bus/mtty", "/sys/devices/virtual/mtty/mtty");
        assert_eq!(
            tree.resolve(
                "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create",
                true
            )
            .unwrap(),
            "/sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-1/create"
        );
        assert_eq!(
            tree.resolve("/sys/class/mdev_bus/mtty", false).unwrap(),
            "/sys/class/mdev_bus/mtty"
        );
        assert_eq!(
            tree.resolve("/sys/class/mdev_bus/mtty/..", true).unwrap(),
            "/sys/devices/virtual/mtty"
        );
        assert_eq!(
            tree.resolve("/sys/class/mdev_bus/none", true),
            Err(libc::ENOENT)
        );
        assert_eq!(
            tree.resolve(
                "/sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-1/create/x",
                true
            ),
            Err(libc::ENOTDIR)
        );
        tree.add_link("/loop/a", "/loop/b");
        tree.add_link("/loop/b", "/loop/a");
        assert_eq!(tree.resolve("/loop/a", true), Err(libc::ELOOP));
    }

    #[test]
    fn walk_edge_cases_and_sorted_listing() {
        let mut tree: Tree<u8> = Tree::new();
        tree.add_file("/b/file", 1);
        tree.mkdir_p("/a/deep/dir");
        // A link at the top level, a relative link climbing out, `..` beyond the root.
        tree.add_link("/top", "a/deep");
        tree.add_link("/a/deep/dir/up", "../../../b");
        assert_eq!(tree.resolve("/top/dir", true).unwrap(), "/a/deep/dir");
        assert_eq!(tree.resolve("/top/dir/up/file", true).unwrap(), "/b/file");
        assert_eq!(tree.resolve("/../../a/./deep/..", true).unwrap(), "/a");
        assert_eq!(tree.resolve("/top", false).unwrap(), "/top");
        assert_eq!(tree.resolve("/", true).unwrap(), "/");
        // A file cannot be walked through, not even with `..`.
        assert_eq!(tree.resolve("/b/file/..", true), Err(libc::ENOTDIR));
        assert_eq!(tree.resolve("/top/dir/up/file/x", true), Err(libc::ENOTDIR));
        assert_eq!(tree.resolve("/top/missing/..", true), Err(libc::ENOENT));
        assert_eq!(
            tree.listing(),
            [
                "/a/",
                "/a/deep/",
                "/a/deep/dir/",
                "/a/deep/dir/up -> ../../../b",
                "/b/",
                "/b/file",
                "/top -> a/deep",
            ]
        );
        assert_eq!(tree.file_paths(), ["/b/file"]);
    }

    #[test]
    fn remove_takes_the_subtree_and_prune_stops_at_keep() {
        let mut tree: Tree<u8> = Tree::new();
        tree.add_file("/a/b/c/file", 1);
        tree.add_file("/a/other", 2);
        tree.remove("/a/b/c/file");
        tree.prune_empty("/a/b/c", "/a");
        assert!(tree.get("/a/b").is_none());
        assert!(tree.get("/a").is_some());
        tree.remove("/a");
        assert_eq!(tree.listing(), Vec::<String>::new());
    }
}
