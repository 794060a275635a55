# Sourced by the setup and test scripts: one clock for a whole setup (nested scripts share
# it through TARN_SETUP_T0) and a `step` line that says what happens and how long it has
# been, so no long piece of work is silent.
#   step "building the workspace"   ->   [setup +1m05s] building the workspace
export TARN_SETUP_T0=${TARN_SETUP_T0:-$(date +%s)}

elapsed() {
    local s=$(( $(date +%s) - TARN_SETUP_T0 ))
    if [ "$s" -lt 60 ]; then printf '%ds' "$s"; else printf '%dm%02ds' $((s / 60)) $((s % 60)); fi
}

step() {
    printf '[%s +%s] %s\n' "${STEP_TAG:-setup}" "$(elapsed)" "$*"
}
