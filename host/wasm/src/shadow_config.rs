//! Edits of a TOML configuration's shadows (`[profiles.shadow]`), keeping its comments and
//! layout: what `PUT /admin/shadow` and `POST /admin/shadow/promote` write before the edited
//! text is applied like any other configuration.

use toml_edit::{ArrayOfTables, DocumentMut, Item, Table};

/// Why an edit cannot apply, and what kind of refusal it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditError {
    /// What kind.
    pub refusal: Refusal,
    /// Why, for the caller.
    pub message: String,
}

/// The kinds of [`EditError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No such profile, or no shadow to remove or promote.
    NotFound,
    /// The configuration cannot take a shadow (it is not TOML).
    Conflict,
    /// The shadow given is not a TOML table.
    Invalid,
}

fn refused(refusal: Refusal, message: impl Into<String>) -> EditError {
    EditError {
        refusal,
        message: message.into(),
    }
}

/// Keys of a profile that stay with its name when its chains are exchanged with its shadow's.
const PROFILE_OWN_KEYS: [&str; 2] = ["scheduler_name", "shadow"];

/// `text` with the shadow of profile `profile` set to `shadow` (a TOML table: the keys of a
/// profile but `scheduler_name` and `shadow`), or removed when `None`. A configuration without
/// profiles runs an implicit `default-scheduler` profile; setting its shadow writes it out.
///
/// # Errors
/// `text` is not TOML (a KubeSchedulerConfiguration, say), `shadow` is not a TOML table, or no
/// profile has that scheduler name.
pub fn set_shadow(text: &str, profile: &str, shadow: Option<&str>) -> Result<String, EditError> {
    let mut document = parse(text)?;
    let shadow = shadow
        .map(|s| {
            s.parse::<DocumentMut>()
                .map(|d| d.as_table().clone())
                .map_err(|e| {
                    let why = format!("the shadow is not a TOML table: {}", e.message());
                    refused(Refusal::Invalid, why)
                })
        })
        .transpose()?;
    let implicit = profiles(&mut document)?.is_empty() && profile == DEFAULT_PROFILE;
    if implicit && shadow.is_some() {
        let mut table = Table::new();
        table.insert("scheduler_name", toml_edit::value(DEFAULT_PROFILE));
        profiles(&mut document)?.push(table);
    }
    let table = find(profiles(&mut document)?, profile)?;
    match shadow {
        Some(mut shadow) => {
            shadow.set_implicit(false);
            table.insert("shadow", Item::Table(shadow));
        }
        None => {
            if table.remove("shadow").is_none() {
                let why = format!("profile {profile:?} has no shadow");
                return Err(refused(Refusal::NotFound, why));
            }
        }
    }
    Ok(document.to_string())
}

/// `text` with profile `profile` running what its shadow ran, and its shadow running what the
/// profile ran: the same edit again rolls it back.
///
/// # Errors
/// `text` is not TOML, or no profile of that name has a shadow.
pub fn promote_shadow(text: &str, profile: &str) -> Result<String, EditError> {
    let mut document = parse(text)?;
    let table = find(profiles(&mut document)?, profile)?;
    let Some(Item::Table(mut shadow)) = table.remove("shadow") else {
        let why = format!("profile {profile:?} has no shadow to promote");
        return Err(refused(Refusal::NotFound, why));
    };
    let live: Vec<String> = table
        .iter()
        .map(|(k, _)| k.to_string())
        .filter(|k| !PROFILE_OWN_KEYS.contains(&k.as_str()))
        .collect();
    let mut demoted = Table::new();
    for key in live {
        if let Some((key, item)) = table.remove_entry(&key) {
            demoted.insert_formatted(&key, item);
        }
    }
    let promoted: Vec<String> = shadow.iter().map(|(k, _)| k.to_string()).collect();
    for key in promoted {
        if let Some((key, item)) = shadow.remove_entry(&key) {
            table.insert_formatted(&key, item);
        }
    }
    demoted.set_implicit(false);
    table.insert("shadow", Item::Table(demoted));
    Ok(document.to_string())
}

const DEFAULT_PROFILE: &str = wasched_core::DEFAULT_SCHEDULER_NAME;

fn parse(text: &str) -> Result<DocumentMut, EditError> {
    if crate::kube_config::is_kube_scheduler_configuration(text) {
        return Err(refused(
            Refusal::Conflict,
            "shadows are set in a TOML configuration; this one is a KubeSchedulerConfiguration",
        ));
    }
    text.parse::<DocumentMut>().map_err(|e| {
        let why = format!("the configuration is not TOML: {}", e.message());
        refused(Refusal::Conflict, why)
    })
}

fn profiles(document: &mut DocumentMut) -> Result<&mut ArrayOfTables, EditError> {
    let item = document
        .entry("profiles")
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    item.as_array_of_tables_mut().ok_or_else(|| {
        refused(
            Refusal::Conflict,
            "`profiles` is not an array of tables ([[profiles]])",
        )
    })
}

fn find<'a>(profiles: &'a mut ArrayOfTables, name: &str) -> Result<&'a mut Table, EditError> {
    profiles
        .iter_mut()
        .find(|p| {
            p.get("scheduler_name")
                .and_then(Item::as_str)
                .unwrap_or(DEFAULT_PROFILE)
                == name
        })
        .ok_or_else(|| {
            let why = format!("no profile has scheduler_name {name:?}");
            refused(Refusal::NotFound, why)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE: &str = r#"# the team's profile
[[profiles]]
scheduler_name = "default-scheduler"
# kube's scores, spread first
scores = [{ plugin = "PodTopologySpread", weight = 2 }]
"#;

    const ZONE: &str = r#"scores = [{ plugin = "NodeAffinity", weight = 5 }]
[plugin_config.NodeAffinity]
addedAffinity = { preferredDuringSchedulingIgnoredDuringExecution = [] }
"#;

    fn profile(text: &str) -> toml::Table {
        let value: toml::Table = toml::from_str(text).expect("TOML");
        value["profiles"].as_array().expect("profiles")[0]
            .as_table()
            .expect("a table")
            .clone()
    }

    #[test]
    fn a_shadow_is_set_replaced_and_removed_keeping_the_comments() {
        let set = set_shadow(LIVE, "default-scheduler", Some(ZONE)).expect("set");
        assert!(set.contains("# kube's scores, spread first"), "{set}");
        let live = profile(&set);
        let shadow = live["shadow"].as_table().expect("a shadow table");
        assert_eq!(shadow["scores"][0]["plugin"].as_str(), Some("NodeAffinity"));
        assert!(shadow["plugin_config"]["NodeAffinity"].is_table());
        assert_eq!(
            live["scores"][0]["plugin"].as_str(),
            Some("PodTopologySpread")
        );

        let replaced = set_shadow(
            &set,
            "default-scheduler",
            Some("percentage_of_nodes_to_score = 100"),
        )
        .expect("replace");
        let shadow = profile(&replaced)["shadow"].clone();
        assert_eq!(shadow.get("scores"), None, "the old shadow's keys are gone");
        assert_eq!(
            shadow["percentage_of_nodes_to_score"].as_integer(),
            Some(100)
        );

        let removed = set_shadow(&replaced, "default-scheduler", None).expect("remove");
        assert_eq!(profile(&removed).get("shadow"), None);
        assert_eq!(
            set_shadow(&removed, "default-scheduler", None)
                .unwrap_err()
                .message,
            "profile \"default-scheduler\" has no shadow"
        );
    }

    #[test]
    fn the_implicit_default_profile_is_written_out_to_take_a_shadow() {
        let set = set_shadow(
            "[runtime]\nparallelism = 2\n",
            "default-scheduler",
            Some(ZONE),
        )
        .expect("set");
        let live = profile(&set);
        assert_eq!(live["scheduler_name"].as_str(), Some("default-scheduler"));
        assert!(live["shadow"].is_table());
        assert_eq!(
            live.get("scores"),
            None,
            "the live profile keeps kube's defaults"
        );
    }

    #[test]
    fn promoting_exchanges_the_chains_and_promoting_again_rolls_back() {
        let set = set_shadow(LIVE, "default-scheduler", Some(ZONE)).expect("set");
        let promoted = promote_shadow(&set, "default-scheduler").expect("promote");
        let live = profile(&promoted);
        assert_eq!(live["scheduler_name"].as_str(), Some("default-scheduler"));
        assert_eq!(live["scores"][0]["plugin"].as_str(), Some("NodeAffinity"));
        assert!(live["plugin_config"]["NodeAffinity"].is_table());
        let shadow = live["shadow"].as_table().expect("the old live profile");
        assert_eq!(
            shadow["scores"][0]["plugin"].as_str(),
            Some("PodTopologySpread")
        );
        assert_eq!(shadow.get("scheduler_name"), None);

        let back = promote_shadow(&promoted, "default-scheduler").expect("roll back");
        assert_eq!(profile(&back), profile(&set));
    }

    #[test]
    fn edits_that_cannot_apply_say_why() {
        assert_eq!(
            promote_shadow(LIVE, "default-scheduler")
                .unwrap_err()
                .message,
            "profile \"default-scheduler\" has no shadow to promote"
        );
        assert_eq!(
            set_shadow(LIVE, "batch", Some(ZONE)).unwrap_err().message,
            "no profile has scheduler_name \"batch\""
        );
        assert!(set_shadow(LIVE, "default-scheduler", Some("scores = ["))
            .unwrap_err()
            .message
            .starts_with("the shadow is not a TOML table"));
        let kube = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
        assert!(set_shadow(kube, "default-scheduler", Some(ZONE))
            .unwrap_err()
            .message
            .starts_with("shadows are set in a TOML configuration"));
    }
}
