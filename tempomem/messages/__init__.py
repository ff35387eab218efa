"""The messages that cross Temporal between tempomem's workflows, activities and starters: names, ids,
inputs, results and search attributes. Content-free by construction, and light (the stdlib, and
``temporalio.common`` for the search-attribute keys), so the workflow sandbox passes them through."""
