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
