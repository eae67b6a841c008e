//! The `kernel` command's result: the fingerprint compared with every Linux era profile, and
//! the experiments replayed on the model, as the report's typed document.

use model::fingerprint::{self, compare, replay_agreement, Fingerprint};
use model::Profile;
use report::kernel::{About, Comparison, ReplayAgreement, Row};
use report::KernelDoc;

/// Why the comparison could not be made.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A built-in profile did not load (a bug in the model's catalogue).
    #[error("profile: {0}")]
    Profile(#[from] model::ModelError),
}

/// `fp` compared with the Linux eras, and replayed on the model with this kernel's measured
/// rules (`linux:here`) and with each best-matching era: how many measured behaviours the
/// model reproduces.
pub fn document(fp: Fingerprint) -> Result<KernelDoc<Fingerprint>, KernelError> {
    let eras = Profile::eras();
    let cmp = compare(&fp, &eras);
    let here = fingerprint::to_profile(&fp, &Profile::builtin("linux")?);
    let mut agree = vec![replay_agreement(&fp, &here)];
    for b in &cmp.best {
        if let Some(p) = eras.iter().find(|p| &p.name == b) {
            agree.push(replay_agreement(&fp, p));
        }
    }
    let about = About {
        kernel: fp.kernel.clone(),
        private_netns: fp.private_netns,
        seconds: fp.seconds,
        notes: fp.notes.clone(),
    };
    Ok(KernelDoc {
        comparison: comparison(cmp),
        replay_agreement: agree.into_iter().map(agreement).collect(),
        fingerprint: fp,
        about,
    })
}

fn comparison(c: fingerprint::Comparison) -> Comparison {
    let row = |r: fingerprint::Row| Row {
        behaviour: r.behaviour,
        rule: r.rule,
        measured: r.measured,
        category: r.category,
        predicted: r.predicted,
        scored: r.scored,
        replayed: r.replayed,
    };
    Comparison {
        profiles: c.profiles,
        rows: c.rows.into_iter().map(row).collect(),
        scores: c.scores,
        scored_rows: c.scored_rows,
        best: c.best,
    }
}

fn agreement(a: fingerprint::ReplayAgreement) -> ReplayAgreement {
    ReplayAgreement { profile: a.profile, agree: a.agree, rows: a.rows, disagree: a.disagree }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model's comparison and the document's say the same (the table and JSON read the
    /// document's): every field carried over.
    #[test]
    fn the_document_carries_the_models_comparison() {
        let fp = Fingerprint { kernel: "6.18".into(), notes: vec!["n".into()], ..Fingerprint::default() };
        let doc = document(fp.clone()).unwrap();
        let model = serde_json::to_value(compare(&fp, &Profile::eras())).unwrap();
        assert_eq!(serde_json::to_value(&doc.comparison).unwrap(), model);
        assert_eq!(doc.about.kernel, "6.18");
        assert_eq!(doc.about.notes, ["n"]);
        assert!(!doc.replay_agreement.is_empty());
        assert_eq!(doc.replay_agreement[0].profile, "linux:here");
    }
}
