//! Answers a plugin's `get` and `list` from the informers of the kinds it declared.

use std::collections::HashMap;
use std::sync::Arc;

use super::informer::Informer;
use super::store::GroupKind;
use crate::model::KindRef;
use crate::runtime::ObjectReader;
use crate::selector::Selector;

/// A plugin's view of the caches: only the kinds it declared it reads.
pub struct CacheReader {
    stores: HashMap<GroupKind, Arc<Informer>>,
}

impl CacheReader {
    /// A reader over these informers.
    pub fn new(informers: impl IntoIterator<Item = Arc<Informer>>) -> Self {
        Self {
            stores: informers.into_iter().map(|i| (i.group_kind(), i)).collect(),
        }
    }
}

impl ObjectReader for CacheReader {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Option<String> {
        let informer = self.stores.get(&GroupKind::from(kind))?;
        informer
            .store()
            .get(namespace, name)
            .map(|o| o.json().to_owned())
    }

    fn list(&self, kind: &KindRef, namespace: &str, selector: &Selector) -> Vec<String> {
        let Some(informer) = self.stores.get(&GroupKind::from(kind)) else {
            return Vec::new();
        };
        informer
            .store()
            .list(namespace, selector)
            .iter()
            .map(|o| o.json().to_owned())
            .collect()
    }
}
