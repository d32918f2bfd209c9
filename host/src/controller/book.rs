//! Everything a controller remembers about one parent, keyed once: whether it failed for good
//! and on what ([`Permanent`]), its conflicts in a row, what was last applied to each of its
//! children ([`Applied`]), its children's fight breakers ([`Breakers`]), and what its last
//! reconcile read ([`Dependencies`], which also answers the reverse question for the handlers).
//!
//! One [`ParentBook`] per controller, outliving the plugin's revisions: every page is stamped
//! with the revision that wrote it, and a revision reads another's page as empty and replaces it
//! on its first write ([`Pages`], a revision's view). New code so starts afresh on each parent
//! (a fix may make a permanent failure go away; a memo of what old code applied says nothing of
//! what new code wants) without a second book, and a parent that moves between revisions in a
//! rollout loses its old memory at once. A page goes as a whole when the parent goes or leaves
//! the plugin's selection ([`ParentBook::forget`]). A page holds only plain data; the rules that
//! read and write it live with their subject (`permanent`, `applied`, `fight`), so each stays a
//! pure, unit-tested module. What the parent read ([`Dependencies`]) is not stamped: it only
//! wakes the parent, and is rewritten by every call.
//!
//! The lock is held only for the span of one closure, never across an await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::applied::Applied;
use super::deps::Dependencies;
use super::fight::Breakers;
use super::permanent::Permanent;
use crate::cache::ObjectKey;
use crate::keys::RevisionId;

/// What is remembered about one parent.
#[derive(Debug, Default)]
pub struct Page {
    /// The revision that wrote it.
    pub revision: RevisionId,
    /// Whether its last reconcile failed for good, and on what inputs.
    pub permanent: Permanent,
    /// Conflicts (409) in a row, cleared by a reconcile that goes through.
    pub conflicts: u32,
    /// What was last applied to each child.
    pub applied: Applied,
    /// Its children's fight breakers.
    pub fights: Breakers,
}

impl Page {
    fn is_empty(&self) -> bool {
        self.permanent.is_empty()
            && self.conflicts == 0
            && self.applied.is_empty()
            && self.fights.is_empty()
    }
}

/// The pages of every parent of one controller.
#[derive(Default)]
pub struct ParentBook {
    pages: Mutex<HashMap<ObjectKey, Page>>,
    deps: Dependencies,
}

impl ParentBook {
    /// Reads `key`'s page as `revision` sees it (an empty one if there is none, or if another
    /// revision wrote it).
    pub fn read<R>(&self, key: &ObjectKey, revision: RevisionId, f: impl FnOnce(&Page) -> R) -> R {
        let pages = self.lock();
        match pages.get(key) {
            Some(page) if page.revision == revision => f(page),
            _ => f(&Page {
                revision,
                ..Page::default()
            }),
        }
    }

    /// Changes `key`'s page as `revision`: another revision's page is replaced by an empty one
    /// first. A page left empty is dropped, and one that stays empty is never made (most calls
    /// on most parents write nothing: the hot path allocates nothing for them).
    pub fn write<R>(
        &self,
        key: &ObjectKey,
        revision: RevisionId,
        f: impl FnOnce(&mut Page) -> R,
    ) -> R {
        let mut pages = self.lock();
        if let Some(page) = pages.get_mut(key) {
            if page.revision != revision {
                *page = Page {
                    revision,
                    ..Page::default()
                };
            }
            let result = f(page);
            if page.is_empty() {
                pages.remove(key);
            }
            return result;
        }
        let mut page = Page {
            revision,
            ..Page::default()
        };
        let result = f(&mut page);
        if !page.is_empty() {
            pages.insert(key.clone(), page);
        }
        result
    }

    /// Forgets everything about `key`: it is gone, or no longer this plugin's to reconcile.
    /// Returns its page, if it had one.
    pub fn forget(&self, key: &ObjectKey) -> Option<Page> {
        let page = self.lock().remove(key);
        self.deps.forget(key);
        page
    }

    /// An input of `key` changed (a child, an object it read): a failure for good is worth
    /// trying again.
    pub fn input_changed(&self, key: &ObjectKey) {
        let mut pages = self.lock();
        if let Some(page) = pages.get_mut(key) {
            page.permanent.forget();
            if page.is_empty() {
                pages.remove(key);
            }
        }
    }

    /// Every parent's inputs changed (the parent kind's schema did).
    pub fn all_inputs_changed(&self) {
        let mut pages = self.lock();
        for page in pages.values_mut() {
            page.permanent.forget();
        }
        pages.retain(|_, page| !page.is_empty());
    }

    /// The sum of `count` over every page.
    pub fn count(&self, count: impl Fn(&Page) -> usize) -> usize {
        self.lock().values().map(count).sum()
    }

    #[cfg(test)]
    /// How many parents have a page.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    #[cfg(test)]
    /// Whether no parent has a page.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What each parent read, and who read what.
    pub fn deps(&self) -> &Dependencies {
        &self.deps
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Page>> {
        self.pages.lock().expect("parent book lock poisoned")
    }
}

/// One revision's view of the controller's book: reads and writes are stamped with it.
#[derive(Clone)]
pub struct Pages {
    book: Arc<ParentBook>,
    revision: RevisionId,
}

impl Pages {
    /// `revision`'s view of `book`.
    pub fn new(book: Arc<ParentBook>, revision: RevisionId) -> Self {
        Self { book, revision }
    }

    /// Reads `key`'s page (empty if another revision wrote it).
    pub fn read<R>(&self, key: &ObjectKey, f: impl FnOnce(&Page) -> R) -> R {
        self.book.read(key, self.revision, f)
    }

    /// Changes `key`'s page (see [`ParentBook::write`]).
    pub fn write<R>(&self, key: &ObjectKey, f: impl FnOnce(&mut Page) -> R) -> R {
        self.book.write(key, self.revision, f)
    }

    /// Takes `key` over from whichever revision served it before: another revision's page is
    /// dropped now rather than when this one first writes (it may never), so the book holds no
    /// stale memory and counts no stale fight. Returns the dropped page.
    pub fn claim(&self, key: &ObjectKey) -> Option<Page> {
        let mut pages = self.book.lock();
        match pages.get(key) {
            Some(page) if page.revision != self.revision => pages.remove(key),
            _ => None,
        }
    }

    /// The revision whose view this is.
    pub fn revision(&self) -> RevisionId {
        self.revision
    }

    /// The whole book.
    pub fn book(&self) -> &ParentBook {
        &self.book
    }

    /// What each parent read, and who read what.
    pub fn deps(&self) -> &Dependencies {
        self.book.deps()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const R1: RevisionId = RevisionId(1);

    #[test]
    fn a_page_should_go_as_a_whole_and_empty_pages_should_not_stay() {
        let book = ParentBook::default();
        let (a, b) = (ObjectKey::new("ns", "a"), ObjectKey::new("ns", "b"));
        let parent = json!({"metadata": {"uid": "u", "generation": 1}});
        book.write(&a, R1, |p| {
            p.permanent.remember(&parent);
            p.conflicts = 2;
        });
        book.write(&b, R1, |p| p.conflicts = 1);
        assert_eq!(book.len(), 2);
        assert!(book.read(&a, R1, |p| p.permanent.holds(&parent)));

        book.input_changed(&a);
        assert!(!book.read(&a, R1, |p| p.permanent.holds(&parent)));
        assert_eq!(
            book.read(&a, R1, |p| p.conflicts),
            2,
            "only the failure is forgotten"
        );

        assert_eq!(
            book.forget(&a).map(|p| p.conflicts),
            Some(2),
            "the page it had"
        );
        assert_eq!(book.read(&a, R1, |p| p.conflicts), 0);
        book.write(&b, R1, |p| p.conflicts = 0);
        assert!(book.is_empty(), "a page with nothing in it is not kept");
        book.read(&ObjectKey::new("ns", "never"), R1, |_| ());
        assert!(book.is_empty(), "reading makes no page");
        book.write(&ObjectKey::new("ns", "never"), R1, |p| {
            p.fights.lift_if_edited(3)
        });
        assert!(book.is_empty(), "nor does a write that leaves it empty");
    }

    #[test]
    fn a_schema_change_should_forget_every_failure() {
        let book = ParentBook::default();
        let parent = json!({"metadata": {"uid": "u", "generation": 1}});
        for name in ["a", "b"] {
            book.write(&ObjectKey::new("ns", name), R1, |p| {
                p.permanent.remember(&parent)
            });
        }
        book.all_inputs_changed();
        assert!(book.is_empty());
    }

    #[test]
    fn a_page_should_belong_to_the_revision_that_wrote_it() {
        let book = Arc::new(ParentBook::default());
        let key = ObjectKey::new("ns", "a");
        let parent = json!({"metadata": {"uid": "u", "generation": 1}});
        let (old, new) = (
            Pages::new(book.clone(), R1),
            Pages::new(book.clone(), RevisionId(2)),
        );
        old.write(&key, |p| {
            p.permanent.remember(&parent);
            p.conflicts = 3;
        });
        assert!(
            !new.read(&key, |p| p.permanent.holds(&parent)),
            "new code is not held to old code's failure"
        );
        assert!(old.read(&key, |p| p.permanent.holds(&parent)));
        new.write(&key, |p| p.conflicts += 1);
        assert_eq!(
            new.read(&key, |p| p.conflicts),
            1,
            "the old page was replaced, not added to"
        );
        assert_eq!(old.read(&key, |p| p.conflicts), 0, "and is gone for good");
        assert_eq!(book.len(), 1);
        assert!(new.claim(&key).is_none(), "its own page stays");
        assert_eq!(
            old.claim(&key).map(|p| p.conflicts),
            Some(1),
            "another's page goes when the parent changes hands"
        );
        assert!(book.is_empty());
    }
}
