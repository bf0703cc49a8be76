//! `bae_session_lineage` on SQLite: where forked and imported sessions
//! came from (`engine::store::LineageRow`). Both backends store the same
//! columns; rows decode through [`lineage_row`].

use engine::store::{LineageRow, Origin};

use super::queries::Q;
use super::rows::Cols;
use super::{finish, ReadResult, Result, StoreConn, StoreError};

impl StoreConn<'_> {
    pub(super) fn insert_lineage(&mut self, row: &LineageRow) -> Result<()> {
        let c = LineageCols::of(row);
        let st = self.stmt(Q::InsertLineage)?;
        st.bind((1, row.session_id.as_str()))?;
        st.bind((2, c.kind))?;
        st.bind((3, c.parent_id))?;
        st.bind((4, c.parent_event_id))?;
        st.bind((5, c.source_session_id))?;
        st.bind((6, row.created_at.as_str()))?;
        st.bind((7, c.copied_through))?;
        finish(st)
    }

    pub(super) fn lineage(&mut self, session_id: &str, children: bool) -> Result<ReadResult> {
        let mut own = None;
        self.each_bound_row(Q::LineageOf, &[session_id], |st| {
            own = Some(lineage_row(st)?);
            Ok(())
        })?;
        let mut kids = Vec::new();
        if children {
            self.each_bound_row(Q::LineageChildren, &[session_id], |st| {
                kids.push(lineage_row(st)?);
                Ok(())
            })?;
        }
        Ok(ReadResult::Lineage {
            own,
            children: kids,
        })
    }
}

/// The nullable columns of a lineage row.
pub(crate) struct LineageCols<'a> {
    pub kind: &'static str,
    pub parent_id: Option<&'a str>,
    pub parent_event_id: Option<&'a str>,
    pub source_session_id: Option<&'a str>,
    /// [`LineageRow::copied_through`] as the column stores it.
    pub copied_through: i64,
}

impl<'a> LineageCols<'a> {
    pub fn of(row: &'a LineageRow) -> Self {
        let copied_through = i64::try_from(row.copied_through).unwrap_or(i64::MAX);
        match &row.origin {
            Origin::Fork {
                parent_id,
                parent_event_id,
            } => LineageCols {
                kind: "fork",
                parent_id: Some(parent_id),
                parent_event_id: Some(parent_event_id),
                source_session_id: None,
                copied_through,
            },
            Origin::Import { source_session_id } => LineageCols {
                kind: "import",
                parent_id: None,
                parent_event_id: None,
                source_session_id: Some(source_session_id),
                copied_through,
            },
        }
    }
}

/// A row of `session_id, kind, parent_id, parent_event_id,
/// source_session_id, created_at, copied_through` (NULL read as 0).
pub(crate) fn lineage_row(c: &impl Cols) -> Result<LineageRow> {
    let origin = match c.text(1)?.as_str() {
        "fork" => Origin::Fork {
            parent_id: c.text(2)?,
            parent_event_id: c.text(3)?,
        },
        "import" => Origin::Import {
            source_session_id: c.text(4)?,
        },
        other => {
            return Err(StoreError::Corrupt(format!(
                "bae_session_lineage.kind {other:?}"
            )))
        }
    };
    Ok(LineageRow {
        session_id: c.text(0)?,
        origin,
        created_at: c.text(5)?,
        copied_through: c.int(6)?.max(0) as u64,
    })
}
