# One static library per layer of Trident, each with its own include root under
# build/layers/<target>/trident/..., made of symbolic links to the source folders it owns. A target
# sees the roots of the layers it links (PUBLIC), never those above it, so that an include that
# points up ("trident/backends/cuda/..." from core) fails to build instead of passing unnoticed.
set(TRIDENT_LAYER_ROOT ${PROJECT_BINARY_DIR}/layers)

# trident_layer_link(<root name> <path>...): links <source dir>/<path> as
# layers/<root name>/trident/<path> (a folder or a single header).
function(trident_layer_link root)
  foreach(path ${ARGN})
    set(link ${TRIDENT_LAYER_ROOT}/${root}/trident/${path})
    get_filename_component(parent ${link} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${path} ${link} SYMBOLIC)
  endforeach()
endfunction()

# trident_add_layer(<target> SOURCES <file>... [HEADER_DIRS <source folder>...])
# A static library whose headers (HEADER_DIRS, e.g. "core" or "backends/cpu") are included as
# "trident/<folder>/<file>.h" by itself and by every target that links it.
function(trident_add_layer name)
  cmake_parse_arguments(LAYER "" "" "SOURCES;HEADER_DIRS" ${ARGN})
  add_library(${name} STATIC ${LAYER_SOURCES})
  add_library(Trident::${name} ALIAS ${name})
  file(MAKE_DIRECTORY ${TRIDENT_LAYER_ROOT}/${name}/trident)
  trident_layer_link(${name} ${LAYER_HEADER_DIRS})
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${TRIDENT_LAYER_ROOT}/${name}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  trident_warnings(${name})
endfunction()
