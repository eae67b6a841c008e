//! The `kernel` command's result: the fingerprint compared with every Linux era profile, and
//! the experiments replayed on the model, as the report's typed document.

use model::fingerprint::{self, compare, replay_agreement, Fingerprint};
use model::Profile;
use report::kernel::About;
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
    Ok(KernelDoc { comparison: cmp, replay_agreement: agree, fingerprint: fp, about })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document carries the model's comparison as it is (one type, `report::kernel`'s),
    /// with the fingerprint's provenance beside it.
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
