//! `larch generate`: man pages and shell completions made from the command line's own
//! definition (clap_mangen, clap_complete), so that they never disagree with `--help`.
//! Packages install them (scripts/build-deb); nothing else needs them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

/// What `larch generate` writes.
#[derive(clap::Subcommand)]
pub enum GenerateCommand {
    /// Write the man pages into a directory and print their paths.
    ///
    /// The pages are larch.1 and one per subcommand: larch-serve.1, larch-sim-replay.1, ...
    /// Packages compress them and install them in /usr/share/man/man1.
    Man {
        /// The directory to write into (created if missing; pages there are replaced).
        dir: PathBuf,
    },
    /// Print a shell's completion script, or write it into a directory.
    ///
    /// With --out, the file is named as that shell's completion directory expects: `larch`
    /// for bash (/usr/share/bash-completion/completions), `_larch` for zsh
    /// (/usr/share/zsh/vendor-completions), `larch.fish` for fish
    /// (/usr/share/fish/vendor_completions.d). To try one in the running shell:
    /// `source <(larch generate completions bash)`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
        /// Write the script into this directory (created if missing) instead of printing it.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// The shells completion scripts are made for: those whose vendor directories Debian
/// packages install into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    /// bash, with the bash-completion package.
    Bash,
    /// zsh.
    Zsh,
    /// fish.
    Fish,
}

impl Shell {
    /// The file name the shell looks the script up by in its completion directory.
    fn file_name(self) -> &'static str {
        match self {
            Shell::Bash => "larch",
            Shell::Zsh => "_larch",
            Shell::Fish => "larch.fish",
        }
    }

    fn generator(self) -> clap_complete::Shell {
        match self {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// `larch generate`, for the command line `cli` (the whole of `larch`).
pub fn run(cmd: GenerateCommand, cli: clap::Command) -> anyhow::Result<ExitCode> {
    match cmd {
        GenerateCommand::Man { dir } => {
            create_dir(&dir)?;
            let mut stdout = std::io::stdout().lock();
            for (name, page) in man_pages(cli)? {
                let path = dir.join(name);
                std::fs::write(&path, page)
                    .with_context(|| format!("writing {}", path.display()))?;
                writeln!(stdout, "{}", path.display())?;
            }
        }
        GenerateCommand::Completions { shell, out } => {
            let script = completion(shell, cli);
            match out {
                Some(dir) => {
                    create_dir(&dir)?;
                    let path = dir.join(shell.file_name());
                    std::fs::write(&path, script)
                        .with_context(|| format!("writing {}", path.display()))?;
                    println!("{}", path.display());
                }
                None => std::io::stdout().lock().write_all(&script)?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// Every man page of `cli` as (file name, roff text): the command's own and, depth first,
/// one for each subcommand that is not hidden, named by its path (`larch-sim-replay.1`).
/// clap's `help` subcommands get none.
pub fn man_pages(mut cli: clap::Command) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    // Building fills in the subcommands' display names (`larch-serve`) and versions.
    cli.build();
    let mut pages = Vec::new();
    add_man_pages(&cli, &mut pages)?;
    Ok(pages)
}

fn add_man_pages(cmd: &clap::Command, pages: &mut Vec<(String, Vec<u8>)>) -> anyhow::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("larch {}", env!("CARGO_PKG_VERSION")))
        .manual("larch")
        .date(commit_date());
    let mut page = Vec::new();
    man.render(&mut page)
        .with_context(|| format!("rendering the man page of {}", cmd.get_name()))?;
    pages.push((man.get_filename(), page));
    for sub in cmd.get_subcommands() {
        if !sub.is_hide_set() && sub.get_name() != "help" {
            add_man_pages(sub, pages)?;
        }
    }
    Ok(())
}

/// The date of the commit the binary was built from (build.rs), so that pages built twice
/// from one commit are the same bytes; empty when it is not known.
fn commit_date() -> &'static str {
    match env!("LARCH_COMMIT_INFO").split_once(", ") {
        Some((_, date)) => date,
        None => "",
    }
}

/// The completion script of `cli` for `shell`.
pub fn completion(shell: Shell, mut cli: clap::Command) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell.generator(), &mut cli, "larch", &mut script);
    script
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The text of a page with roff's escaped hyphens (`\-`) as plain ones.
    fn plain(page: &[u8]) -> String {
        String::from_utf8_lossy(page).replace("\\-", "-")
    }

    #[test]
    fn every_subcommand_has_a_man_page_and_serve_documents_its_options() {
        let pages = man_pages(crate::Cli::command()).unwrap();
        let names: Vec<&str> = pages.iter().map(|(name, _)| name.as_str()).collect();
        for expected in [
            "larch.1",
            "larch-serve.1",
            "larch-sim-replay.1",
            "larch-generate-man.1",
        ] {
            assert!(names.contains(&expected), "{expected} not in {names:?}");
        }
        assert!(
            !names.iter().any(|n| n.contains("help")),
            "a page for clap's help subcommand: {names:?}"
        );
        let serve = plain(&pages.iter().find(|(n, _)| n == "larch-serve.1").unwrap().1);
        assert!(serve.contains(".TH larch-serve 1"), "{serve}");
        assert!(serve.contains("--state-dir"), "{serve}");
        assert!(serve.contains("--listen"), "{serve}");
        let main = plain(&pages.iter().find(|(n, _)| n == "larch.1").unwrap().1);
        // The main page lists the subcommands by their pages.
        assert!(main.contains("larch-serve(1)"), "{main}");
        assert!(main.contains("larch-generate(1)"), "{main}");
    }

    #[test]
    fn completions_know_the_subcommands_and_their_options() {
        let bash = String::from_utf8(completion(Shell::Bash, crate::Cli::command())).unwrap();
        for word in ["serve", "sim", "replay", "cache", "generate", "--state-dir"] {
            assert!(bash.contains(word), "bash completion lacks {word}");
        }
        assert!(
            bash.contains("complete -F _larch"),
            "not a bash completion script"
        );
        let zsh = String::from_utf8(completion(Shell::Zsh, crate::Cli::command())).unwrap();
        assert!(zsh.starts_with("#compdef larch"), "{}", &zsh[..40]);
        let fish = String::from_utf8(completion(Shell::Fish, crate::Cli::command())).unwrap();
        assert!(fish.contains("complete -c larch"), "not a fish script");
        assert!(fish.contains("serve"));
    }
}
