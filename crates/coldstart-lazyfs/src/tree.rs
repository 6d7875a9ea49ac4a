//! The inode table: the manifest's entries as a tree the kernel can walk.

use std::collections::{BTreeMap, HashMap};

use coldstart_bundle::{EntryKind, Manifest};

/// An inode number as the kernel sees it. The root is 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ino(pub u64);

pub const ROOT: Ino = Ino(1);

/// One node: the root (no entry) or a manifest entry.
#[derive(Debug)]
pub struct Node {
    pub parent: Ino,
    /// Index into `Manifest::files`, `None` for the root.
    pub entry: Option<usize>,
    pub kind: EntryKind,
    pub children: BTreeMap<String, Ino>,
}

/// Inodes of a manifest: inode `i + 2` is `manifest.files[i]`.
#[derive(Debug)]
pub struct Tree {
    nodes: Vec<Node>,
}

impl Tree {
    /// Builds the tree of a validated manifest.
    pub fn new(manifest: &Manifest) -> Tree {
        let by_path: HashMap<&str, Ino> = manifest
            .files
            .iter()
            .enumerate()
            .map(|(i, e)| (e.path.as_str(), Ino(i as u64 + 2)))
            .collect();
        let mut nodes = vec![Node {
            parent: ROOT,
            entry: None,
            kind: EntryKind::Dir,
            children: BTreeMap::new(),
        }];
        for (i, e) in manifest.files.iter().enumerate() {
            let parent = match e.path.rsplit_once('/') {
                Some((p, _)) => by_path[p],
                None => ROOT,
            };
            nodes.push(Node { parent, entry: Some(i), kind: e.kind, children: BTreeMap::new() });
        }
        for (i, e) in manifest.files.iter().enumerate() {
            let (parent, name) = match e.path.rsplit_once('/') {
                Some((p, n)) => (by_path[p], n),
                None => (ROOT, e.path.as_str()),
            };
            nodes[(parent.0 - 1) as usize].children.insert(name.to_owned(), Ino(i as u64 + 2));
        }
        Tree { nodes }
    }

    pub fn get(&self, ino: Ino) -> Option<&Node> {
        ino.0.checked_sub(1).and_then(|i| self.nodes.get(i as usize))
    }

    pub fn lookup(&self, parent: Ino, name: &str) -> Option<Ino> {
        self.get(parent)?.children.get(name).copied()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_bundle::{Entry, HotSet, FORMAT, VERSION};

    fn entry(path: &str, kind: EntryKind) -> Entry {
        Entry { kind, ..Entry::dir(path, 0o755) }
    }

    #[test]
    fn paths_become_a_tree() {
        let m = Manifest {
            format: FORMAT.into(),
            version: VERSION,
            chunk_size: 1,
            compression: Default::default(),
            files: vec![
                entry("a", EntryKind::Dir),
                entry("a-b", EntryKind::File),
                entry("a/c", EntryKind::Dir),
                entry("a/c/d", EntryKind::File),
            ],
            objects: Vec::new(),
            hot: HotSet::default(),
        };
        let t = Tree::new(&m);
        let a = t.lookup(ROOT, "a").unwrap();
        let c = t.lookup(a, "c").unwrap();
        let d = t.lookup(c, "d").unwrap();
        assert_eq!(t.get(d).unwrap().entry, Some(3));
        assert_eq!(t.get(d).unwrap().parent, c);
        assert_eq!(t.lookup(ROOT, "a-b"), Some(Ino(3)));
        assert_eq!(t.lookup(a, "d"), None);
        assert!(t.get(Ino(0)).is_none() && t.get(Ino(99)).is_none());
        let names: Vec<&String> = t.get(ROOT).unwrap().children.keys().collect();
        assert_eq!(names, ["a", "a-b"]);
    }
}
