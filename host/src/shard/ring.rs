//! Who owns which parent, as a pure function of who is in the ring and what each member has
//! said it serves. No cluster, no clock: [`crate::shard`] feeds it what the Leases say.
//!
//! - A [`View`] is a set of members. Every parent has exactly one owner in a view, by
//!   rendezvous hashing of its key: each member scores the key, the highest score owns it.
//!   Adding or removing one member moves only the parents that member gains or had (about
//!   1/N of them), and every replica computes the same owner from the same view, with no
//!   central sharder and nothing written on the objects.
//! - Each member publishes the view it serves under (in its Lease). [`Claims`] is one
//!   replica's rule for what it may reconcile: a parent its own published view gives it, which
//!   no other live member's published view gives to that member. Two replicas cannot both
//!   reconcile a parent (see [`crate::shard`] for why the reads make this hold).

use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::keys::ObjectKey;

/// A set of members, sorted and without duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View {
    members: Vec<Member>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    id: String,
    /// The first eight bytes of the SHA-256 of the id: mixed with a key's hash to score it.
    seed: u64,
}

impl View {
    /// The view of these members (in any order, repeats ignored).
    pub fn of<S: AsRef<str>>(members: impl IntoIterator<Item = S>) -> Self {
        let mut ids: Vec<String> = members
            .into_iter()
            .map(|m| m.as_ref().to_owned())
            .filter(|m| !m.is_empty())
            .collect();
        ids.sort();
        ids.dedup();
        Self {
            members: ids
                .into_iter()
                .map(|id| Member {
                    seed: head(&Sha256::digest(id.as_bytes())),
                    id,
                })
                .collect(),
        }
    }

    /// The view as written in a Lease: the members joined by commas.
    pub fn parse(text: &str) -> Self {
        Self::of(text.split(',').map(str::trim))
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The member owning the parent whose key hashes to `key` (none in an empty view).
    pub fn owner(&self, key: KeyHash) -> Option<&str> {
        self.members
            .iter()
            .max_by_key(|m| (mix(m.seed ^ key.0), m.seed))
            .map(|m| m.id.as_str())
    }
}

impl std::fmt::Display for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, m) in self.members.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&m.id)?;
        }
        Ok(())
    }
}

/// A parent's key, hashed once for all the views it is looked up in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    /// The hash of `key`: SHA-256 of `namespace/name`, so every replica and every restart
    /// agrees (the standard library's hasher is seeded per process).
    pub fn of(key: &ObjectKey) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(key.namespace.as_bytes());
        hasher.update(b"/");
        hasher.update(key.name.as_bytes());
        Self(head(&hasher.finalize()))
    }
}

fn head(digest: &[u8]) -> u64 {
    u64::from_be_bytes(digest[..8].try_into().expect("eight bytes"))
}

/// SplitMix64's finalizer: a member's score for a key. Mixing the two seeds (rather than
/// hashing the pair again) keeps a lookup at one SHA-256 per key however many members there
/// are; the finalizer spreads every input bit over the output, so the highest score is a fair
/// draw.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What one replica may reconcile, as of one reading of the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// This replica.
    me: String,
    /// Views that must each give a parent to this replica: the one it has published, and
    /// while it moves to another, that one too (so it serves only what it keeps).
    mine: Vec<Arc<View>>,
    /// Every other live member and the view it has published.
    others: Vec<(String, Arc<View>)>,
    /// A view without the members whose Leases are late: what this replica would serve if
    /// they died. Its parents' children are kept whole, and nothing more.
    warm: Option<Arc<View>>,
}

impl Claims {
    /// The claims of `me`, serving what every view of `mine` gives it and no other member's
    /// published view gives that member.
    pub fn new(me: &str, mine: Vec<Arc<View>>, others: Vec<(String, Arc<View>)>) -> Self {
        Self {
            me: me.to_owned(),
            mine,
            others,
            warm: None,
        }
    }

    /// These claims, also keeping whole the children of the parents `warm` gives this
    /// replica ([`Claims::in_views`]); it owns no more for that.
    pub fn warming(mut self, warm: Option<Arc<View>>) -> Self {
        self.warm = warm;
        self
    }

    /// Whether this replica reconciles the parent `key`.
    pub fn owns(&self, key: &ObjectKey) -> bool {
        self.owns_hash(KeyHash::of(key))
    }

    /// Whether some view of this replica's own gives it the parent `key`: it owns the parent,
    /// or will once the others agree, or did until its move completes, or would if the
    /// members whose Leases are late died. What its caches keep whole, so that a move finds
    /// the children already there.
    pub fn in_views(&self, key: &ObjectKey) -> bool {
        let key = KeyHash::of(key);
        self.mine.is_empty()
            || self
                .mine
                .iter()
                .chain(&self.warm)
                .any(|v| v.owner(key) == Some(self.me.as_str()))
    }

    /// [`Claims::owns`] for a key already hashed.
    pub fn owns_hash(&self, key: KeyHash) -> bool {
        !self.mine.is_empty()
            && self
                .mine
                .iter()
                .all(|v| v.owner(key) == Some(self.me.as_str()))
            && self
                .others
                .iter()
                .all(|(other, v)| v.owner(key) != Some(other.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<ObjectKey> {
        (0..n)
            .map(|i| ObjectKey::new(format!("ns{}", i % 7), format!("parent-{i}")))
            .collect()
    }

    fn owners<'a>(view: &'a View, keys: &[ObjectKey]) -> Vec<&'a str> {
        keys.iter()
            .map(|k| view.owner(KeyHash::of(k)).unwrap())
            .collect()
    }

    #[test]
    fn every_parent_should_have_one_owner_and_the_shares_should_be_even() {
        let view = View::of(["c", "a", "b", "a"]);
        assert_eq!(view.to_string(), "a,b,c", "sorted, repeats dropped");
        let keys = keys(30_000);
        let owners = owners(&view, &keys);
        for member in ["a", "b", "c"] {
            let share = owners.iter().filter(|o| **o == member).count();
            // A fair draw gives 10,000 ± 3 standard deviations (about 245).
            assert!(
                (9_700..=10_300).contains(&share),
                "{member} owns {share} of 30,000"
            );
        }
    }

    #[test]
    fn a_member_joining_should_take_parents_only_for_itself() {
        let keys = keys(9_000);
        let before = View::of(["a", "b"]);
        let after = View::of(["a", "b", "c"]);
        let (old, new) = (owners(&before, &keys), owners(&after, &keys));
        let moved = old.iter().zip(&new).filter(|(o, n)| o != n).count();
        assert!(
            old.iter().zip(&new).all(|(o, n)| o == n || *n == "c"),
            "a parent moves only to the new member"
        );
        assert!(
            (2_700..=3_300).contains(&moved),
            "about a third moves: {moved}"
        );
        // And leaving is the same move backwards.
        assert_eq!(owners(&View::parse("a, b"), &keys), old);
    }

    #[test]
    fn the_same_view_should_give_the_same_owner_everywhere() {
        let key = KeyHash::of(&ObjectKey::new("team", "web"));
        assert_eq!(key, KeyHash::of(&ObjectKey::new("team", "web")));
        assert_ne!(key, KeyHash::of(&ObjectKey::new("tea", "mweb")));
        assert_eq!(
            View::of(["x", "y", "z"]).owner(key),
            View::parse("z,y,x").owner(key)
        );
        assert_eq!(View::default().owner(key), None);
    }

    fn claims(me: &str, mine: &[&View], others: &[(&str, &View)]) -> Claims {
        Claims::new(
            me,
            mine.iter().map(|v| Arc::new((*v).clone())).collect(),
            others
                .iter()
                .map(|(o, v)| ((*o).to_owned(), Arc::new((*v).clone())))
                .collect(),
        )
    }

    #[test]
    fn members_on_the_same_view_should_split_every_parent_between_them() {
        let view = View::of(["a", "b", "c"]);
        let all = ["a", "b", "c"].map(|me| {
            let others: Vec<(&str, &View)> = ["a", "b", "c"]
                .into_iter()
                .filter(|o| *o != me)
                .map(|o| (o, &view))
                .collect();
            claims(me, &[&view], &others)
        });
        for key in keys(3_000) {
            let serving = all.iter().filter(|c| c.owns(&key)).count();
            assert_eq!(serving, 1, "{key} is served by exactly one member");
        }
    }

    #[test]
    fn a_joining_member_should_wait_for_the_old_owner_to_publish_the_new_view() {
        let (old, new) = (View::of(["a"]), View::of(["a", "b"]));
        let keys = keys(2_000);
        // b has published the new view; a still serves under the old one, which gives it all.
        let b = claims("b", &[&new], &[("a", &old)]);
        assert!(
            keys.iter().all(|k| !b.owns(k)),
            "b takes nothing a still claims"
        );
        // a moves: while it drains it serves only what both views give it.
        let a_moving = claims("a", &[&old, &new], &[("b", &new)]);
        let a_done = claims("a", &[&new], &[("b", &new)]);
        let b_done = claims("b", &[&new], &[("a", &new)]);
        for k in &keys {
            assert_eq!(a_moving.owns(k), a_done.owns(k));
            assert!(
                !(a_done.owns(k) && b_done.owns(k)),
                "{k}: two owners once both published"
            );
            assert!(a_done.owns(k) || b_done.owns(k), "{k}: no owner");
        }
    }

    #[test]
    fn two_members_with_different_views_should_never_both_serve_a_parent() {
        // a thinks the ring is {a, b}; b thinks it is {a, b, c}; c has published {b, c}
        // (it has not seen a). Whatever each computes, a parent is served at most once.
        let (ab, abc, bc) = (
            View::of(["a", "b"]),
            View::of(["a", "b", "c"]),
            View::of(["b", "c"]),
        );
        let a = claims("a", &[&ab], &[("b", &abc), ("c", &bc)]);
        let b = claims("b", &[&abc], &[("a", &ab), ("c", &bc)]);
        let c = claims("c", &[&bc], &[("a", &ab), ("b", &abc)]);
        for key in keys(3_000) {
            let serving = [&a, &b, &c].iter().filter(|m| m.owns(&key)).count();
            assert!(serving <= 1, "{key} has {serving} owners");
        }
        assert!(
            !claims("a", &[], &[]).owns(&ObjectKey::new("x", "y")),
            "no view: nothing"
        );
    }

    #[test]
    fn a_warm_view_should_keep_the_children_of_what_a_late_member_would_leave_and_own_nothing() {
        // c's Lease is late: a keeps whole the children of the parents it would get if c
        // died, and serves no more than before.
        let (abc, ab) = (View::of(["a", "b", "c"]), View::of(["a", "b"]));
        let plain = claims("a", &[&abc], &[("b", &abc), ("c", &abc)]);
        let warm = plain.clone().warming(Some(Arc::new(ab.clone())));
        let keys = keys(3_000);
        let mut would_gain = 0;
        for k in &keys {
            assert_eq!(
                warm.owns(k),
                plain.owns(k),
                "{k}: warming owns nothing more"
            );
            let from_c =
                abc.owner(KeyHash::of(k)) == Some("c") && ab.owner(KeyHash::of(k)) == Some("a");
            would_gain += usize::from(from_c);
            assert_eq!(warm.in_views(k), plain.in_views(k) || from_c, "{k}");
        }
        assert!(
            (400..=600).contains(&would_gain),
            "about half of c's third: {would_gain}"
        );
        assert_ne!(warm, plain, "a new assignment, so the caches follow it");
    }
}
