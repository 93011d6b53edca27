//! Vilmo as the committed state that a block's writes are computed against
//! ([`gigas_primitives::state_keys`] owns the layout; the store still does not interpret keys:
//! it only answers reads and prefix scans).

use gigas_primitives::state_keys::{LayoutError, StateReader};

use crate::storage::Storage;
use crate::store::Vilmo;

impl<S: Storage> StateReader for Vilmo<S> {
    type Error = LayoutError;

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, LayoutError> {
        Ok(Vilmo::get(self, key).map(<[u8]>::to_vec))
    }

    /// A scan of every live key: the layout calls it only to wipe an account that still has
    /// stored slots, which since Cancun never happens.
    fn keys_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, LayoutError> {
        let mut keys = Vec::new();
        self.for_each(|key, _| {
            if key.starts_with(prefix) {
                keys.push(key.to_vec());
            }
        });
        keys.sort_unstable();
        Ok(keys)
    }
}
