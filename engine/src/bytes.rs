//! Bytes for a connection: owned by one response, or shared by every
//! stream a live event fans out to (one rendering, no per-stream copy).

use std::ops::Deref;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum Bytes {
    Owned(Vec<u8>),
    /// The same frame handed to several connections.
    Shared(Arc<[u8]>),
    /// An event's shared rendering ([`crate::streams::EventJson`]).
    Text(Arc<String>),
}

impl Bytes {
    /// A buffer to extend: the bytes themselves when owned, a copy when
    /// shared.
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Shared(s) => s.to_vec(),
            Bytes::Text(s) => s.as_bytes().to_vec(),
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Shared(s) => s,
            Bytes::Text(s) => s.as_bytes(),
        }
    }
}

/// The same bytes, however they are held.
impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        **self == **other
    }
}

impl Eq for Bytes {}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Self {
        Bytes::Owned(v)
    }
}

impl From<Arc<[u8]>> for Bytes {
    fn from(s: Arc<[u8]>) -> Self {
        Bytes::Shared(s)
    }
}

impl From<Arc<String>> for Bytes {
    fn from(s: Arc<String>) -> Self {
        Bytes::Text(s)
    }
}

impl<'a> IntoIterator for &'a Bytes {
    type Item = &'a u8;
    type IntoIter = std::slice::Iter<'a, u8>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_and_owned_read_the_same() {
        let shared: Bytes = Arc::<[u8]>::from(&b"frame"[..]).into();
        let owned: Bytes = b"frame".to_vec().into();
        assert_eq!(&*shared, &*owned);
        assert_eq!(shared, owned);
        assert_eq!(shared.clone().into_vec(), b"frame");
        assert_eq!(owned.into_vec(), b"frame");
    }
}
