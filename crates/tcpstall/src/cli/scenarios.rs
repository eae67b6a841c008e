//! `tcpstall scenarios`: the built-in catalogue.

use report::{Export, ScenariosDoc};
use scenario::Scenario;

use super::output;
use crate::flags::scenarios::ScenariosArgs;

pub(crate) fn run(args: ScenariosArgs) -> anyhow::Result<i32> {
    if let Some(name) = &args.show {
        output::write_bytes(Scenario::builtin_as_file(name)?.as_bytes(), None)?;
        return Ok(0);
    }
    let list = match &args.name {
        Some(n) => vec![Scenario::builtin(n)?],
        None => Scenario::catalogue(),
    };
    let bytes = ScenariosDoc::of(&list).export(args.format.into())?;
    output::write_bytes(&bytes, None)?;
    Ok(0)
}
